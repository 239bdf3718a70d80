"""The agent API of kiln serve through the official openai client: structured output,
tool calls (a two-turn loop, streamed calls), reasoning content, and a fuzz of schemas
and tool definitions that must never get a 5xx.

Run by tests/server/test_serve_openai.c against a server on a random-weight model with
Qwen3's tokenizer and chat template:
    python openai_agent.py --base-url http://127.0.0.1:PORT/v1 --api-key KEY --model ID
The model's output is random, so every structure checked here exists only because the
server enforced it (an unconstrained random model never writes valid JSON). jsonschema
comes from Debian's python3-jsonschema (scripts/deps.sh), outside the client's venv.
"""
import argparse
import json
import random
import sys

sys.path.append("/usr/lib/python3/dist-packages")  # python3-jsonschema; the venv's packages come first
import jsonschema  # noqa: E402
import openai  # noqa: E402


def fail(what, detail):
    print(f"openai_agent.py: FAIL {what}: {detail}", file=sys.stderr)
    sys.exit(1)


def expect(cond, what, detail=""):
    if not cond:
        fail(what, detail)


# Bounded schemas: every output finishes ("stop") well within max_tokens, so it must validate.
BOUNDED = [
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]},
                                      "who": {"type": "string", "maxLength": 6}},
     "required": ["ok", "n", "who"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "enum": [7, 8]}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "null"}, {"const": "fixed"}]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "boolean"}, "y": {"type": ["null", "boolean"]}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"type": "array", "items": {"$ref": "#/$defs/pt"},
                                                                          "maxItems": 2}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}}, "required": ["s"]},
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                                       "required": ["tz"]}}}


def structured(client, model, quick):
    for i, schema in enumerate(BOUNDED):
        for seed, temp in ((None, 0),) if quick else ((None, 0), (i + 1, 1.0)):
            kw = {"temperature": temp} if seed is None else {"temperature": temp, "seed": seed}
            r = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Give me JSON."}], max_tokens=200,
                response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}},
                **kw)
            c = r.choices[0]
            expect(c.finish_reason == "stop", f"json_schema {i}", f"finish {c.finish_reason!r}: {c.message.content!r}")
            try:
                v = json.loads(c.message.content)
            except ValueError as e:
                fail(f"json_schema {i}", f"not JSON ({e}): {c.message.content!r}")
            try:
                jsonschema.validate(v, schema)
            except jsonschema.ValidationError as e:
                fail(f"json_schema {i}", f"does not validate: {e.message}: {c.message.content!r}")
    # json_object: any object; it may run to max_tokens, but what it wrote is an object's start
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "JSON"}], max_tokens=40,
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content
    expect(text.lstrip().startswith("{"), "json_object", repr(text))
    if r.choices[0].finish_reason == "stop":
        expect(isinstance(json.loads(text), dict), "json_object", repr(text))
    # streamed: the chunks join into valid output
    parts, finish = [], None
    for ch in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "JSON"}], max_tokens=200, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": BOUNDED[0]}}):
        if ch.choices and ch.choices[0].delta.content:
            parts.append(ch.choices[0].delta.content)
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    expect(finish == "stop", "json_schema streamed", f"finish {finish!r}")
    jsonschema.validate(json.loads("".join(parts)), BOUNDED[0])


def bad_schemas(client, model):
    cases = [({"type": "string", "pattern": "^a"}, "pattern"),
             ({"type": "integer", "minimum": 3}, "minimum"),
             ({"type": "string", "format": "email"}, "format"),
             ({"$ref": "#/$defs/nope"}, "points at nothing"),
             ({"type": "object", "properties": {"a": {"not": {}}}}, "'not'"),
             ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf")]
    for schema, word in cases:
        try:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                           response_format={"type": "json_schema",
                                                            "json_schema": {"name": "bad", "schema": schema}})
            fail("bad schema", f"{schema} was accepted")
        except openai.BadRequestError as e:
            expect(word in e.body.get("message", ""), "bad schema", f"{schema}: {e.body}")
            expect(e.param == "response_format.json_schema.schema", "bad schema param", f"{e.param!r}")
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {
                                           "type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}}}],
                                       tool_choice="required")
        fail("bad tool schema", "accepted")
    except openai.BadRequestError as e:
        expect("pattern" in e.body.get("message", "") and e.param == "tools[0].function.parameters", "bad tool schema",
               f"{e.body}")


def check_call(what, call, tools):
    names = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    expect(call.type == "function" and call.id, what, f"{call}")
    expect(call.function.name in names, what, f"name {call.function.name!r}")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, names[call.function.name])
    return args


def tool_loop(client, model):
    messages = [{"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "What's the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME], max_tokens=200,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       parallel_tool_calls=False)
    c = r.choices[0]
    expect(c.finish_reason == "tool_calls", "tool turn 1", f"finish {c.finish_reason!r}: {c.message}")
    expect(c.message.content in (None, ""), "tool turn 1", f"content {c.message.content!r}")
    expect(len(c.message.tool_calls) == 1, "tool turn 1", f"{c.message.tool_calls}")
    call = c.message.tool_calls[0]
    expect(call.function.name == "get_weather", "tool turn 1", call.function.name)
    check_call("tool turn 1", call, [WEATHER, TIME])
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "{\"temp\": 21, \"sky\": \"clear\"}"})
    r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME], max_tokens=8,
                                       tool_choice="none")
    c = r.choices[0]
    expect(c.finish_reason in ("stop", "length"), "tool turn 2", f"finish {c.finish_reason!r}")
    expect(isinstance(c.message.content, str) and not c.message.tool_calls, "tool turn 2", f"{c.message}")
    # required, two tools, parallel calls allowed: each call validates
    r = client.chat.completions.create(model=model, messages=messages[:2], tools=[WEATHER, TIME], max_tokens=300,
                                       tool_choice="required", temperature=1.0, seed=5)
    c = r.choices[0]
    if c.finish_reason == "tool_calls":
        for call in c.message.tool_calls:
            check_call("tool required", call, [WEATHER, TIME])
    else:
        expect(c.finish_reason == "length", "tool required", f"finish {c.finish_reason!r}")


def tool_stream(client, model):
    calls, finish, saw_head = {}, None, False
    for ch in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "time?"}],
                                             tools=[WEATHER, TIME], tool_choice="required", max_tokens=300,
                                             parallel_tool_calls=False, stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                expect(tc.id and tc.type == "function" and tc.function.name, "stream head",
                       f"the first chunk of a call carries id, type and name: {tc}")
                calls[tc.index] = {"name": tc.function.name, "args": tc.function.arguments or ""}
                saw_head = True
            else:
                calls[tc.index]["args"] += tc.function.arguments or ""
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    expect(finish == "tool_calls" and saw_head and len(calls) == 1, "stream", f"finish {finish!r}, calls {calls}")
    call = calls[0]
    tool = {"get_weather": WEATHER, "get_time": TIME}[call["name"]]
    jsonschema.validate(json.loads(call["args"]), tool["function"]["parameters"])


# A grammar that makes the random model think first: the server must split it out.
THINK = 'root ::= "<think>" [a-z ]{1,20} "</think>" "\\n\\n" [a-z]{1,12}'


def reasoning(client, model):
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hm"}], max_tokens=80,
                                       extra_body={"grammar": THINK})
    m = r.choices[0].message
    rc = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content")
    expect(r.choices[0].finish_reason == "stop", "reasoning", f"{r.choices[0]}")
    expect(isinstance(rc, str) and rc and "<think>" not in rc and "</think>" not in rc, "reasoning", f"{m}")
    expect("<think>" not in m.content and m.content and m.content.isalpha(), "reasoning content", f"{m}")
    rs, cs = [], []
    for ch in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hm"}], max_tokens=80,
                                             stream=True, extra_body={"grammar": THINK}):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        extra = d.model_extra or {}
        if extra.get("reasoning_content"):
            rs.append(extra["reasoning_content"])
        if d.content:
            cs.append(d.content)
    expect(rs and "".join(rs).strip(" ") and all("<" not in p for p in rs), "reasoning streamed", f"{rs}")
    expect(cs and "".join(cs).isalpha(), "content streamed", f"{cs}")


def random_schema(rng, depth=0):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "array", "object", "anyOf", "ref",
             "bad"]
    k = rng.choice(kinds[:7] if depth > 2 else kinds)
    if k in ("string", "integer", "number", "boolean", "null"):
        s = {"type": k}
        if k == "string" and rng.random() < 0.5:
            s["maxLength"] = rng.randint(0, 5)
        return s
    if k == "enum":
        return {"enum": [rng.choice([1, "a", None, True, 2.5, "é\"\\"]) for _ in range(rng.randint(1, 3))]}
    if k == "const":
        return {"const": rng.choice([0, "x", [1, 2], {"k": None}])}
    if k == "array":
        return {"type": "array", "items": random_schema(rng, depth + 1), "maxItems": rng.randint(0, 3)}
    if k == "object":
        props = {f"p{i}\"": random_schema(rng, depth + 1) for i in range(rng.randint(0, 3))}
        return {"type": "object", "properties": props, "required": [p for p in props if rng.random() < 0.5],
                "additionalProperties": rng.choice([True, False])}
    if k == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if k == "ref":
        return {"$ref": rng.choice(["#", "#/$defs/x", "#/definitions/y", "http://x"])}
    return rng.choice([{"type": "strin"}, {"minimum": 1}, {"type": 3}, {"items": 5}, {"required": "a"},
                       {"properties": []}, {"enum": []}, True, False, [], {"maxLength": -1}, {"allOf": []}])


def fuzz(client, model, n):
    rng = random.Random(19)
    raw = client.with_options(max_retries=0)
    for i in range(n):
        schema = random_schema(rng)
        body = {"model": model, "messages": [{"role": "user", "content": "go"}], "max_tokens": 24}
        if i % 2:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "f", "schema": schema}}
        else:
            fn = {"name": rng.choice(["f", "g_1", "bad name", ""]), "parameters": schema}
            body["tools"] = [{"type": rng.choice(["function", "function", "x"]), "function": fn}]
            body["tool_choice"] = rng.choice(["auto", "required", "none", {"type": "function", "function": {"name": "f"}}])
        try:
            r = raw.post("/chat/completions", body=body, cast_to=object)
        except openai.BadRequestError:
            continue
        except openai.APIStatusError as e:
            fail("fuzz", f"status {e.status_code} for {json.dumps(body)}: {e.body}")
        c = r["choices"][0]
        if i % 2 and c["finish_reason"] == "stop":
            try:
                jsonschema.validate(json.loads(c["message"]["content"]), schema)
            except (ValueError, jsonschema.ValidationError) as e:
                fail("fuzz", f"output does not validate ({e}): {c['message']['content']!r} for {json.dumps(schema)}")
            except jsonschema.SchemaError:
                pass  # a schema kiln accepted but jsonschema calls invalid: nothing to check against


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--fuzz", type=int, default=120)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a sanitized server is slow)")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    structured(client, a.model, a.quick)
    bad_schemas(client, a.model)
    tool_loop(client, a.model)
    tool_stream(client, a.model)
    reasoning(client, a.model)
    fuzz(client, a.model, 25 if a.quick else a.fuzz)
    print("openai_agent.py: all checks passed")


if __name__ == "__main__":
    main()
