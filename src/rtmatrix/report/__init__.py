"""HTML report rendered from run records with jinja2 templates shipped as package data."""

from __future__ import annotations

from rtmatrix.report.render import render_report

__all__ = ["render_report"]
