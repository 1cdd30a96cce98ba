"""azlib: AlphaZero-style reinforcement learning of language models, as a notebook-driven kit.
The package holds the real code; notebooks/ only call it, explain and plot."""

__version__ = "0.1.0"
