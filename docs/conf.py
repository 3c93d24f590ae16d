"""Sphinx configuration of cuguard's user guide and API reference (built by ``nox -s docs``)."""

from __future__ import annotations

project = "cuguard"
author = "the cuguard authors"
copyright = "the cuguard authors, Apache-2.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "test_examples.py"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = True

html_theme = "alabaster"
html_title = "cuguard"
html_static_path: list[str] = []
