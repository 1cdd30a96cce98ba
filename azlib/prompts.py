"""Text conventions every layer shares: the answer line a finished answer ends with.
Patterns only; what a reward or a search makes of them lives with the reward or the search."""

from __future__ import annotations

import re

# An answer line followed by a newline: the writer has committed to its answer.
ANSWER_LINE = re.compile(r"####\s*-?[\d,]*\.?\d+\s*\n")
