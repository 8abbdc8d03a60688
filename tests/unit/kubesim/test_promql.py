"""The PromQL subset kubesim's Prometheus API answers (kubesim/promql.py), with Prometheus's semantics."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from kubesim.promql import PromQLError, parse

SERIES = [
    ({"__name__": "A", "gpu": "0", "Hostname": "n1"}, "1"),
    ({"__name__": "A", "gpu": "1", "Hostname": "n1"}, "2"),
    ({"__name__": "A", "gpu": "0", "Hostname": "n2", "pod": "p"}, "3"),
    ({"__name__": "B", "gpu": "0", "Hostname": "n1"}, "4"),
    ({"__name__": "B", "gpu": "5", "Hostname": "n1"}, "5"),
    ({"__name__": "C", "gpu": "0", "Hostname": "n3"}, "6"),
]


def source(accepts: Callable[[str], bool]) -> Iterable[tuple[dict[str, str], str]]:
    return [(dict(lbls), v) for lbls, v in SERIES if accepts(lbls["__name__"])]


def values(query: str) -> list[str]:
    return [v for _, v in parse(query).evaluate(source)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("A", ["1", "2", "3"]),
        ('A{gpu="0"}', ["1", "3"]),
        ("A{gpu='0', Hostname!=\"n2\",}", ["1"]),
        ('A{Hostname=~"n.*", gpu!~"1"}', ["1", "3"]),
        ('A{Hostname=~"n"}', []),  # anchored: "n" is not "n1"
        ('A{pod=""}', ["1", "2"]),  # an absent label matches the empty string
        ('{__name__=~"A|C", gpu="0"}', ["1", "3", "6"]),
        ('{__name__="B"}', ["4", "5"]),
        ("A or C", ["1", "2", "3", "6"]),
        ('A{Hostname="n2"} or C', ["3", "6"]),
        # `or` keeps the right side's series only where the left has no series with the same labels,
        # metric name aside (as on a real Prometheus): B{gpu=0,n1} has A's labels, B{gpu=5} does not
        ("A or B", ["1", "2", "3", "5"]),
        ("(A{gpu='1'} OR B)", ["2", "4", "5"]),
        ("nothing", []),
    ],
)
def test_selectors_and_or_select_as_prometheus_does(query: str, expected: list[str]) -> None:
    assert values(query) == expected


def test_metrics_no_selector_can_match_are_not_even_generated() -> None:
    asked: list[str] = []

    def counting(accepts: Callable[[str], bool]) -> Iterable[tuple[dict[str, str], str]]:
        asked.extend(n for n in ("A", "B", "C") if accepts(n))
        return source(accepts)

    parse('{__name__=~"B|C"} or A').evaluate(counting)
    assert asked == ["B", "C", "A"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "1:1: parse error: no expression found in input"),
        ("rate(A[5m])", "functions (rate) are not answered"),
        ("sum by (gpu) (A)", 'unexpected "by"'),
        ("A[5m]", "range vectors are not answered"),
        ("A > 0", 'unexpected ">"'),
        ("A{gpu=0}", "expected string"),
        ('A{gpu="0"', "unexpected end of input inside braces"),
        ('A{gpu~"0"}', 'expected "="'),
        ('{gpu=~".*"}', "vector selector must contain at least one non-empty matcher"),
        ('A{gpu=~"("}', "error parsing regexp"),
        ('A{gpu="0}', "unterminated quoted string"),
        ("A or", "unexpected end of input"),
    ],
)
def test_queries_outside_the_subset_are_refused_with_a_message_naming_the_problem(
    query: str, message: str
) -> None:
    with pytest.raises(
        PromQLError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        parse(query)
