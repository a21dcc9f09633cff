"""The answer's quality-vs-speed chart: a point per candidate with memory as its area, the
Pareto front outlined, excluded candidates grey with their reason on hover, the constraints
drawn."""

from __future__ import annotations

import re

from rtmatrix.report.plots import quality_speed
from rtmatrix.report.render import render_html
from rtmatrix.selection import Constraints, select
from tests.helpers.selection_runs import default_run, make_cell, make_run, model_in


def test_each_candidate_is_a_point_with_its_place_or_why_it_is_out_on_hover() -> None:
    c = Constraints().with_overrides(["max_kld=0.01"])
    plot = quality_speed(model_in(select([default_run()], c)), c, 0)
    svg = plot.svg or ""
    titles = re.findall(r'<g id="answer-0-cand-\d+"><title>([^<]+)</title>', svg)
    assert len(titles) == 4
    assert "llama_cpp q8_0: place 1 (Pareto layer 1)" in titles
    out = "onnxruntime int8: excluded — KLD 0.0812 nats &gt; max_kld 0.01 nats"
    assert out in titles  # escaped in the SVG, read as ">" on hover
    for said in ("llama_cpp q8_0 · 508 MiB", "max_kld 0.01", "min_tg_tps 10", "Pareto front"):
        assert said in svg, said


def test_a_model_without_a_quality_figure_gets_a_note() -> None:
    run = make_run(0, [make_cell("alpha", "q8_0", tg=10.0, kld=None)])
    c = Constraints()
    plot = quality_speed(model_in(select([run], c)), c)
    assert plot.svg is None and plot.note and "no candidate has a quality figure" in plot.note


def test_the_report_answer_carries_the_chart_for_a_real_model() -> None:
    html = render_html([default_run()])
    answer = html[html.index('<section id="answer">') : html.index("</section>")]
    assert 'data-plot="answer-0"' in answer and "Quality against speed for smollm2-135m" in answer
