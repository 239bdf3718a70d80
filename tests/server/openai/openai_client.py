"""kiln serve through the official openai Python client (pinned in requirements.txt).

Run by tests/test_serve_openai.c against a started server:
    python openai_client.py --base-url http://127.0.0.1:PORT/v1 --api-key KEY --model ID
Every check names itself; the first failure exits 1 with the reason on stderr.
"""
import argparse
import sys
import traceback

import openai

FINISH = ("stop", "length")
MAX_TOKENS = 8


def fail(what, detail):
    print(f"openai_client.py: FAIL {what}: {detail}", file=sys.stderr)
    sys.exit(1)


def expect(cond, what, detail=""):
    if not cond:
        fail(what, detail)


def check_usage(what, usage, max_tokens):
    expect(usage is not None, what, "no usage")
    expect(isinstance(usage.prompt_tokens, int) and usage.prompt_tokens > 0, what, f"prompt_tokens {usage}")
    expect(isinstance(usage.completion_tokens, int) and 0 < usage.completion_tokens <= max_tokens, what,
           f"completion_tokens {usage}")
    expect(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, what, f"total_tokens {usage}")


def check_error_body(what, e, status, param=None, code=None):
    expect(e.status_code == status, what, f"status {e.status_code}, want {status}")
    body = e.body
    expect(isinstance(body, dict), what, f"the error body did not parse: {body!r}")
    expect(isinstance(body.get("message"), str) and body["message"], what, f"message: {body!r}")
    expect(body.get("type") == "invalid_request_error", what, f"type: {body!r}")
    expect("param" in body and "code" in body, what, f"param/code missing: {body!r}")
    if param is not None:
        expect(e.param == param, what, f"param {e.param!r}, want {param!r}: {body!r}")
    if code is not None:
        expect(e.code == code, what, f"code {e.code!r}, want {code!r}: {body!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    messages = [{"role": "system", "content": "You are a storyteller."},
                {"role": "user", "content": "Tell me about a dog."}]

    # models.list holds the server's model
    ids = [m.id for m in client.models.list()]
    expect(a.model in ids, "models.list", f"{a.model!r} not in {ids!r}")
    m = client.models.retrieve(a.model)
    expect(m.id == a.model and m.object == "model", "models.retrieve", f"{m}")
    try:
        client.models.retrieve("no-such-model")
        fail("models.retrieve (unknown)", "no exception")
    except openai.NotFoundError as e:
        check_error_body("models.retrieve (unknown)", e, 404, code="model_not_found")

    # chat, not streamed
    r = client.chat.completions.create(model=a.model, messages=messages, max_tokens=MAX_TOKENS)
    expect(r.object == "chat.completion", "chat", f"object {r.object!r}")
    expect(r.id and r.model == a.model and isinstance(r.created, int), "chat", f"id/model/created: {r}")
    expect(len(r.choices) == 1, "chat", f"{len(r.choices)} choices")
    c = r.choices[0]
    expect(c.message.role == "assistant", "chat", f"role {c.message.role!r}")
    expect(isinstance(c.message.content, str) and c.message.content, "chat", f"content {c.message.content!r}")
    expect(c.finish_reason in FINISH, "chat", f"finish_reason {c.finish_reason!r}")
    check_usage("chat usage", r.usage, MAX_TOKENS)
    if c.finish_reason == "length":
        expect(r.usage.completion_tokens == MAX_TOKENS, "chat", f"length after {r.usage.completion_tokens} tokens")
    chat_text, chat_usage = c.message.content, r.usage

    # chat, streamed with a usage chunk: greedy, so the same text as above
    text, finish, usage, n_usage, roles = "", None, None, 0, 0
    stream = client.chat.completions.create(model=a.model, messages=messages, max_tokens=MAX_TOKENS, stream=True,
                                            stream_options={"include_usage": True})
    for ch in stream:
        expect(ch.object == "chat.completion.chunk", "chat stream", f"object {ch.object!r}")
        if ch.usage is not None:
            expect(not ch.choices, "chat stream", f"the usage chunk has choices: {ch}")
            usage, n_usage = ch.usage, n_usage + 1
            continue
        expect(len(ch.choices) == 1, "chat stream", f"chunk {ch}")
        d = ch.choices[0].delta
        if d.role:
            roles += 1
            expect(d.role == "assistant", "chat stream", f"role {d.role!r}")
        if d.content:
            text += d.content
        if ch.choices[0].finish_reason:
            expect(finish is None, "chat stream", "two finish reasons")
            finish = ch.choices[0].finish_reason
    expect(roles == 1, "chat stream", f"{roles} chunks named the role")
    expect(text, "chat stream", "no content")
    expect(text == chat_text, "chat stream", f"streamed {text!r} but not streamed {chat_text!r}")
    expect(finish in FINISH, "chat stream", f"finish_reason {finish!r}")
    expect(n_usage == 1, "chat stream", f"{n_usage} usage chunks with include_usage")
    check_usage("chat stream usage", usage, MAX_TOKENS)
    expect(usage.completion_tokens == chat_usage.completion_tokens, "chat stream usage", f"{usage} vs {chat_usage}")

    # chat, streamed without include_usage: no usage chunk
    stream = client.chat.completions.create(model=a.model, messages=messages, max_tokens=2, stream=True)
    chunks = list(stream)
    expect(chunks and all(ch.usage is None for ch in chunks), "chat stream without usage", f"{chunks}")

    # completions, not streamed and streamed
    prompt = "Once upon a time"
    r = client.completions.create(model=a.model, prompt=prompt, max_tokens=MAX_TOKENS)
    expect(r.object == "text_completion", "completion", f"object {r.object!r}")
    expect(len(r.choices) == 1 and isinstance(r.choices[0].text, str) and r.choices[0].text, "completion",
           f"choices {r.choices}")
    expect(r.choices[0].finish_reason in FINISH, "completion", f"finish_reason {r.choices[0].finish_reason!r}")
    check_usage("completion usage", r.usage, MAX_TOKENS)
    want = r.choices[0].text
    text, finish, usage = "", None, None
    for ch in client.completions.create(model=a.model, prompt=prompt, max_tokens=MAX_TOKENS, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.usage is not None and not ch.choices:
            usage = ch.usage
            continue
        expect(len(ch.choices) == 1, "completion stream", f"chunk {ch}")
        text += ch.choices[0].text or ""
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    expect(text == want, "completion stream", f"streamed {text!r} but not streamed {want!r}")
    expect(finish in FINISH, "completion stream", f"finish_reason {finish!r}")
    check_usage("completion stream usage", usage, MAX_TOKENS)

    # a wrong key: AuthenticationError (401) with OpenAI's error body
    bad = openai.OpenAI(base_url=a.base_url, api_key="not-the-key", max_retries=0, timeout=60)
    try:
        bad.chat.completions.create(model=a.model, messages=messages, max_tokens=2)
        fail("wrong key", "no exception")
    except openai.AuthenticationError as e:
        check_error_body("wrong key", e, 401, code="invalid_api_key")
    try:
        bad.models.list()
        fail("wrong key (models)", "no exception")
    except openai.AuthenticationError as e:
        check_error_body("wrong key (models)", e, 401, code="invalid_api_key")

    # bad requests: BadRequestError (400) naming the field
    for what, kw, param in [
        ("max_tokens=-1", {"max_tokens": -1}, "max_tokens"),
        ("temperature=5", {"temperature": 5}, "temperature"),
        ("n=2", {"n": 2}, "n"),
        ("stream_options without stream", {"stream_options": {"include_usage": True}}, "stream_options"),
    ]:
        try:
            client.chat.completions.create(model=a.model, messages=messages, **kw)
            fail(what, "no exception")
        except openai.BadRequestError as e:
            check_error_body(what, e, 400, param=param)
    try:
        client.chat.completions.create(model=a.model, messages=[{"role": "wizard", "content": "x"}], max_tokens=2)
        fail("unknown role", "no exception")
    except openai.BadRequestError as e:
        check_error_body("unknown role", e, 400, param="messages[0].role")
    try:
        client.completions.create(model=a.model, prompt="Once upon a time " * 3000, max_tokens=2)
        fail("prompt over the context", "no exception")
    except openai.BadRequestError as e:
        check_error_body("prompt over the context", e, 400, param="prompt", code="context_length_exceeded")

    # and the server still answers as before
    r = client.chat.completions.create(model=a.model, messages=messages, max_tokens=MAX_TOKENS)
    expect(r.choices[0].message.content == chat_text, "chat after the errors",
           f"{r.choices[0].message.content!r} vs {chat_text!r}")
    print(f"openai_client.py: ok (openai {openai.__version__}, model {a.model}, chat {chat_text!r})")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        print("openai_client.py: FAIL (exception):", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
