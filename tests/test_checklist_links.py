"""Chapter 15's checklist: every symptom lists measurements and causes, and every link it
gives leads to a page and an anchor of the built site."""
from __future__ import annotations

import re

import pytest

from sim.checklist import SYMPTOMS, ChecklistParams, all_links, checklist


def test_every_symptom_has_measurements_causes_and_links():
    assert len(SYMPTOMS) == 6
    for key in SYMPTOMS:
        r = checklist(ChecklistParams(symptom=key))
        assert 2 <= len(r.measure) and 3 <= len(r.causes) <= 5
        assert len(r.causes) == len(r.confirm) == len(r.fixes) == len(r.links) == len(r.cause_short)
        assert all(links for links in r.links), key


def test_unknown_symptom_is_named():
    with pytest.raises(ValueError, match="unknown symptom 'slow'; valid symptoms: slow-first-token"):
        ChecklistParams(symptom="slow")


def test_every_checklist_link_exists_in_the_built_site(site_dir):
    missing = []
    for link in all_links():
        page = site_dir / link.page
        if not page.is_file():
            missing.append(f"{link.href}: no page")
        elif link.anchor and f'id="{link.anchor}"' not in page.read_text():
            missing.append(f"{link.href}: no anchor")
    assert missing == []


def test_figure_links_point_at_figures_on_their_own_chapter_page(site_dir):
    for link in all_links():
        if link.anchor and link.anchor.startswith("fig-"):
            html = (site_dir / link.page).read_text()
            assert re.search(rf'<figure class="fig" id="{link.anchor}" data-figure="{link.anchor[4:]}"', html), link.href


def test_figure_links_open_their_figure_in_a_state_it_accepts():
    """A link that opens a figure in the state showing the cause names controls that figure
    has, with values those controls take (checked as the notebook API checks them), and its
    address carries them as the chapter page reads them: <figure id>.<key>=<value>."""
    import widgets
    from widgets.state import apply_state

    with_state = [link for link in all_links() if link.state]
    assert len(with_state) >= 8
    for link in with_state:
        assert link.anchor.startswith("fig-"), link.href
        fid = link.anchor[4:]
        view = apply_state(widgets.build(fid), **dict(link.state))
        for key, value in link.state:
            assert view.controls[key].value == value, link.href
            shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
            assert f"{fid}.{key}={shown}" in link.href.split("?")[1].split("#")[0].split("&"), link.href
    plain = next(link for link in all_links() if not link.state and link.anchor)
    assert "?" not in plain.href
