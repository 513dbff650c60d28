"""Sessions' history building: what each turn's request holds, from given replies (no server)."""

import pytest

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest, Turn
from loadgen.workloads import Lengths, resolve
from loadgen.workloads import tokens
from loadgen.workloads.sessions import SessionSource, SessionSpec, prefix_text, user_message


def _reqs(n, start=0):
    return iter([GenRequest("w", max_tokens=10 + i, prompt=f"question {i}", seed=i) for i in range(start, start + n)])


def test_later_turns_carry_the_history_the_real_replies_and_the_next_user_message():
    src = SessionSource(SessionSpec(turns=3), _reqs(6))
    conv = src.start()
    t1 = conv.first()
    assert t1.messages == ({"role": "user", "content": "question 0"},)
    assert t1.turn == Turn(1, 1, 3) and t1.wants_reply and t1.max_tokens == 10
    t2 = conv.after(True, "reply zero")
    assert t2.messages == ({"role": "user", "content": "question 0"}, {"role": "assistant", "content": "reply zero"},
                           {"role": "user", "content": "question 1"})
    assert t2.turn == Turn(1, 2, 3) and t2.max_tokens == 11 and t2.seed == 1 and t2.prompt is None
    t3 = conv.after(True, "reply one")
    assert [m["content"] for m in t3.messages] == ["question 0", "reply zero", "question 1", "reply one", "question 2"]
    assert t3.turn.last and not t3.wants_reply
    assert conv.after(True, "reply two") is None  # the last turn ends it
    second = src.start().first()  # the next session draws the stream's next three requests
    assert second.turn == Turn(2, 1, 3) and second.messages[-1]["content"] == "question 3"


def test_a_failed_turn_ends_its_session():
    conv = SessionSource(SessionSpec(turns=4), _reqs(4)).start()
    conv.first()
    assert conv.after(False, None) is None


def test_the_completion_route_renders_the_history_as_the_simulators_chat_template():
    conv = SessionSource(SessionSpec(turns=2), _reqs(2)).start()
    conv.first()
    t2 = conv.after(True, " an answer")
    assert t2.as_prompt() == "User: question 0\nAssistant:  an answer\nUser: question 1\nAssistant:"


def test_a_chat_workloads_later_turns_take_its_requests_last_user_message():
    reqs = resolve("chat", Lengths()).requests(3)
    first = [next(reqs) for _ in range(2)]
    conv = SessionSource(SessionSpec(turns=2), iter(first)).start()
    t1 = conv.first()
    assert t1.messages == first[0].messages and t1.workload == "chat"
    t2 = conv.after(True, "ok")
    assert t2.messages[-1] == {"role": "user", "content": user_message(first[1])}
    assert t2.messages[-1]["content"] == first[1].messages[-1]["content"]


def test_the_shared_prefix_is_one_system_message_of_its_tokens_the_same_text_everywhere():
    text = prefix_text(300)
    assert tokens.count(text) == 300 and text == prefix_text(300)
    src = SessionSource(SessionSpec(turns=2, shared_prefix=300), _reqs(6))
    firsts = [src.start().first() for _ in range(3)]
    assert all(r.messages[0] == {"role": "system", "content": text} for r in firsts)


def test_a_prefix_ratio_gives_that_share_of_sessions_the_shared_prefix_and_the_rest_their_own_of_its_length():
    src = SessionSource(SessionSpec(turns=1, shared_prefix=40, prefix_ratio=0.25), _reqs(8))
    systems = [src.start().first().messages[0]["content"] for _ in range(8)]
    shared = prefix_text(40)
    assert sum(s == shared for s in systems) == 2
    assert len(set(systems)) == 7 and all(tokens.count(s) == 40 for s in systems)


def test_one_turn_with_a_prefix_is_a_plain_request_with_no_session_tag():
    r = SessionSource(SessionSpec(turns=1, shared_prefix=5), _reqs(1)).start().first()
    assert r.turn is None and not r.wants_reply and r.messages[0]["role"] == "system"
    assert not SessionSpec().active and SessionSpec(shared_prefix=1).active and not SessionSpec(shared_prefix=1).multi_turn


@pytest.mark.parametrize("kw, flag", [({"turns": 0}, "--turns"), ({"think_s": -1.0}, "--think-time"),
                                      ({"think_s": float("nan")}, "--think-time"),
                                      ({"shared_prefix": -3}, "--shared-prefix"),
                                      ({"shared_prefix": 10, "prefix_ratio": 1.5}, "--prefix-ratio"),
                                      ({"prefix_ratio": 0.5}, "--prefix-ratio")])
def test_a_bad_session_spec_is_one_line_naming_its_flag(kw, flag):
    with pytest.raises(LoadgenError) as e:
        SessionSpec(**kw)
    assert str(e.value).startswith(flag) and "\n" not in str(e.value)
