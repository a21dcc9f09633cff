"""Turn-taking between two workers (``compare --mode alternate``): the gate and the coordinator
over real Unix sockets, with threads standing in for the worker processes."""

from __future__ import annotations

import threading
import time

import pytest

from rtmatrix.turns import TurnGate, TurnServer, coordinate, turn_order


def test_turn_order_is_abba() -> None:
    assert turn_order("ab", 3) == list("abbaab")
    assert turn_order("ba", 2) == list("baab")


def test_turn_order_strict_alternation_and_unknown_pattern() -> None:
    assert turn_order("ab", 3, "abab") == list("ababab")
    assert turn_order("ba", 2, "abab") == list("baba")
    with pytest.raises(ValueError, match="turn pattern 'aabb'"):
        turn_order("ab", 2, "aabb")


def _worker(path: str, name: str, reps: int, log: list[str], lock: threading.Lock) -> TurnGate:
    gate = TurnGate(path)
    for _ in range(reps):
        gate.wait()
        with lock:
            log.append(name + "+")
        time.sleep(0.01)  # the repetition: nobody else may start meanwhile
        with lock:
            log.append(name + "-")
        gate.done()
    gate.close()
    return gate


def test_two_workers_take_turns_one_at_a_time_in_abba_order() -> None:
    servers = {n: TurnServer(n) for n in "ab"}
    log: list[str] = []
    lock = threading.Lock()
    gates: dict[str, TurnGate] = {}

    def run(name: str) -> None:
        gates[name] = _worker(servers[name].path, name, 3, log, lock)

    threads = {n: threading.Thread(target=run, args=(n,)) for n in "ab"}
    for t in threads.values():
        t.start()
    info = coordinate(servers, "ba", 3, lambda n: threads[n].is_alive(), arrive_s=10)
    for t in threads.values():
        t.join(10)
    assert info["alternated"] and info["turns"] == {"a": 3, "b": 3}
    starts = [e[0] for e in log if e.endswith("+")]
    assert starts == list("baabba")
    assert all(log[i][0] == log[i + 1][0] for i in range(0, len(log), 2))  # never overlapping
    assert gates["a"].evidence().to_dict() == {"gated_reps": 3}


def test_a_side_that_dies_releases_the_other_which_runs_ungated() -> None:
    servers = {n: TurnServer(n) for n in "ab"}
    log: list[str] = []
    lock = threading.Lock()
    gates: dict[str, TurnGate] = {}
    t = threading.Thread(target=lambda: gates.setdefault("a", _worker(servers["a"].path, "a", 3,
                                                                        log, lock)))  # fmt: skip
    t.start()
    info = coordinate(servers, "ab", 3, lambda n: n == "a" and t.is_alive(), arrive_s=10)
    t.join(10)
    assert not t.is_alive()  # not stuck at its gate
    assert not info["alternated"] and "ended before its first" in info["failure"]
    assert gates["a"].gated == 0 and gates["a"].released  # closed, or never let in
    assert len([e for e in log if e.endswith("+")]) == 3  # it ran every repetition anyway


def test_a_gate_without_a_listener_runs_ungated() -> None:
    gate = TurnGate("/nonexistent/turns.sock")
    gate.wait()
    gate.done()
    assert gate.gated == 0 and "cannot connect" in str(gate.released)
    assert TurnGate(None).evidence().to_dict() == {
        "gated_reps": 0,
        "released": "no turn socket in the job",
    }
