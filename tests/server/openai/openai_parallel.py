"""Several threads streaming through the official openai client at once (issue 17's check).

Run by tests/test_serve_openai.c against a server started with --parallel:
    python openai_parallel.py --base-url URL --api-key KEY --model ID
Eight threads stream greedy completions of different prompts and lengths at once (twice
as many as the server's 4 slots: the rest wait in its queue); each streamed text must equal
the same request answered alone, not streamed. The first failure exits 1 with the reason.
"""
import argparse
import sys
import threading

import openai

PROMPTS = ["Once upon a time", "The little dog", "Lily liked to play", "One day, a bird",
           "Tom and his mom went", "There was a big tree", "The sun was hot", "She had a red ball"]


def fail(what, detail):
    print(f"openai_parallel.py: FAIL {what}: {detail}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    streamed = [None] * len(PROMPTS)
    errors = []

    def stream(i):
        try:
            text, finish = "", None
            for chunk in client.completions.create(model=a.model, prompt=PROMPTS[i], max_tokens=20 + 5 * i,
                                                   temperature=0, stream=True):
                if chunk.choices:
                    text += chunk.choices[0].text or ""
                    finish = chunk.choices[0].finish_reason or finish
            streamed[i] = (text, finish)
        except Exception as e:  # noqa: BLE001 (every failure is reported)
            errors.append(f"stream {i}: {e!r}")

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("parallel streams", "; ".join(errors))
    for i, p in enumerate(PROMPTS):
        alone = client.completions.create(model=a.model, prompt=p, max_tokens=20 + 5 * i, temperature=0)
        text, finish = streamed[i]
        if text != alone.choices[0].text:
            fail(f"stream {i}", f"streamed {text!r}, alone {alone.choices[0].text!r}")
        if finish not in ("stop", "length") or finish != alone.choices[0].finish_reason:
            fail(f"stream {i}", f"finish {finish!r}, alone {alone.choices[0].finish_reason!r}")
    print(f"openai_parallel.py: {len(PROMPTS)} streams at once, each as alone")


if __name__ == "__main__":
    main()
