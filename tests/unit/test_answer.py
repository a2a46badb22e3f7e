"""The group commit's answer: given once by one thread, read or called back in another."""

from __future__ import annotations

import threading
import time

import pytest

from pgflow.runtime.answer import Answer


def test_a_callback_added_before_the_answer_runs_in_the_answering_thread():
    answer: Answer[bool] = Answer()
    seen = []
    answer.add_done_callback(lambda a: seen.append((a.result(), threading.current_thread().name)))
    thread = threading.Thread(target=answer.set_result, args=(True,), name="committer")
    thread.start()
    thread.join()
    assert seen == [(True, "committer")] and answer.done()


def test_a_callback_added_after_the_answer_runs_at_once():
    answer: Answer[int] = Answer()
    answer.set_result(7)
    seen = []
    answer.add_done_callback(lambda a: seen.append(a.result()))
    assert seen == [7]


def test_result_waits_for_the_answer_and_an_error_is_raised():
    answer: Answer[bool] = Answer()
    threading.Timer(0.05, answer.set_exception, args=(ValueError("refused"),)).start()
    with pytest.raises(ValueError, match="refused"):
        answer.result(timeout=5)
    assert isinstance(answer.exception(), ValueError)


def test_result_gives_up_after_its_timeout():
    answer: Answer[bool] = Answer()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        answer.result(timeout=0.05)
    assert time.monotonic() - started >= 0.05 and not answer.done()


def test_an_answer_is_given_once():
    answer: Answer[bool] = Answer()
    answer.set_result(False)
    with pytest.raises(RuntimeError):
        answer.set_result(True)
    assert answer.result() is False


def test_a_failing_callback_stops_no_other(caplog):
    answer: Answer[bool] = Answer()
    seen = []
    answer.add_done_callback(lambda a: 1 / 0)
    answer.add_done_callback(lambda a: seen.append(a.result()))
    answer.set_result(True)
    assert seen == [True]
    assert "a callback of an answer failed" in caplog.text
