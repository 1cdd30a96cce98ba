"""Teachers: an ensemble of backends proposing right and wrong continuations (ensemble, weights, backends, presets), and
the terminal checker that says when an answer is complete."""

from azlib.teachers.checker import TerminalChecker, rule_verdict
from azlib.teachers.ensemble import PERSONAS, Proposal, TeacherEnsemble, teacher_messages
from azlib.teachers.presets import TIERS, chosen_teachers, loopback_teacher, tier_teachers
from azlib.teachers.spec import TeacherSpec
from azlib.teachers.weights import TeacherWeights

__all__ = ["PERSONAS", "TIERS", "Proposal", "TeacherEnsemble", "TeacherSpec", "TeacherWeights", "TerminalChecker",
           "chosen_teachers", "loopback_teacher", "rule_verdict", "teacher_messages", "tier_teachers"]
