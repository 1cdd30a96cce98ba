"""Teachers: an ensemble of backends proposing right and wrong continuations, with adaptive
weights and fault tolerance, and the terminal checker that says when an answer is complete."""

from azlib.teachers.checker import TerminalChecker, rule_verdict
from azlib.teachers.ensemble import PERSONAS, TIERS, Proposal, TeacherEnsemble, teacher_messages, tier_teachers
from azlib.teachers.spec import TeacherSpec

__all__ = ["PERSONAS", "TIERS", "Proposal", "TeacherEnsemble", "TeacherSpec", "TerminalChecker", "rule_verdict",
           "teacher_messages", "tier_teachers"]
