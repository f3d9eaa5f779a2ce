"""How the report puts pictures in its one HTML file: a PNG inline as base64, and a matplotlib
figure drawn off-screen into one. Leaves out: what the pictures show (page.py, curves.py).
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any


def img(png: bytes, alt: str, css: str = "", width: int = 0) -> str:
    """A PNG inline (base64), `width` px wide where given."""
    data = base64.b64encode(png).decode()
    attrs = (f" class='{css}'" if css else "") + (f" width='{width}'" if width else "")
    return f"<img{attrs} alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def pyplot() -> Any:
    """matplotlib's pyplot, drawing off-screen (Agg: set before the first figure)."""
    import matplotlib.pyplot  # lazy: a second to import, and only drawing needs it

    matplotlib.use("Agg")
    return matplotlib.pyplot


def figure(fig: Any, tight: bool = True) -> str:
    """A matplotlib figure as an inline PNG (closed once drawn)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight" if tight else None)
    pyplot().close(fig)
    return img(buf.getvalue(), "figure")
