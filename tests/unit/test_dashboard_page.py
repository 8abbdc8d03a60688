"""The dashboard page's navigation reaches every panel it has (each `<h2>` section has a tab)."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "broker" / "api" / "dashboard" / "index.html"


def test_every_panel_has_a_tab() -> None:
    html = PAGE.read_text()
    panels = re.findall(r'<section id="([\w-]+)" aria-labelledby="[\w-]+">\s*<h2', html)
    nav = re.search(r"<nav[^>]*>(.*?)</nav>", html, re.S)
    assert panels and nav is not None
    tabs = re.findall(r'href="#([\w-]+)"', nav.group(1))
    assert sorted(tabs) == sorted(panels)
