"""The lab: what runs the notebooks and keeps their results, around the algorithms (azlib's other packages), which
it imports and which never import it.

config: notebook parameters and the profiles in params/; plan: a profile's predicted GPU memory and time;
preflight: what this machine lacks for a profile, each with its fix; runner: the notebooks executed with papermill
into one run folder; run_folder: a run's folder and its page; stored_notebooks: the notebooks kept in the repository
with their outputs; shipped_results: the measured runs kept in benchmarks/results; exercises: the notebooks' graded
exercises and concept checks; cli: `python -m azlib`."""
