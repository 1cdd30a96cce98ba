"""A widget's still picture for readers without a kernel: the repository page, nbviewer, a notebook opened before it
runs. Adds a static form (SVG, PNG or text) to the widget's display; the live widget is unchanged."""

from __future__ import annotations


class StillPicture:
    """Mix in before the widget class; `still()` returns the static form as {mimetype: data}. JupyterLab with a
    kernel draws the live widget (its renderer ranks first); a stored notebook keeps only the still form
    (azlib.lab.stored_notebooks). A still form without text gets a line saying what the picture is, in place of the widget
    object's repr."""

    def still(self) -> dict[str, str]:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        text = {"text/plain": f"{type(self).__name__}: a still picture; JupyterLab with a kernel draws it live"}
        return {**data, **text, **self.still()}, metadata
