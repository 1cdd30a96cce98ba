"""The lab: what runs the notebooks and keeps their results, around the algorithms (azlib's other packages), which it
imports and which never import it. Its modules are listed in docs/library.md."""
