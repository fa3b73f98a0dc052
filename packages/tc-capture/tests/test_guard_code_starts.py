"""The guard generator's scan for code offsets agrees with tokenize wherever a hoisted path may start."""

from __future__ import annotations

import io
import random
import tokenize

from tc_capture.cache import guards

_FRAGMENTS = ["F[0]", "._modules", "['h']", '["x"]', "_m1", " and ", " or ", "(", ")", ", ", "not ", " is ",
              "==", "1", "2.5e3", "x", ".weight", "rb", "r", "b", "u", "f", "B", "type(", "[", "]", " ", "=", ":"]


def _string(rng: random.Random) -> str:
    quote = rng.choice("'\"")
    body = "".join(rng.choice(["a", " ", "#", "F[0]", "\\\\", "\\" + quote, "'" if quote == '"' else '"', "x.y",
                               "_m2", "{", "}", "\\n"]) for _ in range(rng.randint(0, 6)))
    prefix = rng.choice(["", "", "", "r", "b", "rb", "Br", "u", "f", "rf"])
    triple = rng.random() < 0.05
    return f"{prefix}{quote * 3 if triple else quote}{body}{quote * 3 if triple else quote}"


def _line(rng: random.Random) -> str:
    parts = [_string(rng) if rng.random() < 0.25 else rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 14))]
    if rng.random() < 0.2:
        parts.append("  # " + _string(rng) + " F[0]")
    return "".join(parts)


def _tokenizes(line: str) -> bool:
    try:
        list(tokenize.generate_tokens(io.StringIO(line).readline))
        return True
    except (tokenize.TokenError, SyntaxError):
        return False


def test_scan_agrees_with_tokenize_at_every_candidate_offset():
    rng = random.Random(0)
    fast = checked = 0
    for _ in range(4000):
        line = _line(rng)
        if not _tokenizes(line):
            continue
        scanned, tokenized = guards._code_starts(line), guards._tokenized_starts(line)
        fast += not isinstance(scanned, set)
        for p, c in enumerate(line):
            if c.isidentifier() and not (p and guards._WORD_OR_DOT.match(line, p - 1)):
                checked += 1
                assert (p in scanned) == (p in tokenized), (line, p)
    assert fast > 1000 and checked > 10000  # the scan, not only the tokenize fallback, was compared


def test_guard_like_lines():
    lines = ["if not (_m3._modules['h']._modules['0'] is _m4 and F[0]._modules['ln_f'].eps == 1e-05): return {fail}",
             "_m5 = F[0]._modules['wte']._parameters['weight']  # 'F[0]' in a comment",
             "if type(F[1]) is not int or F[1] != 2: return {fail}",
             'if G["torch"].is_grad_enabled() is True and F[0].__dict__["_x"] == \'#\': return {fail}']
    for line in lines:
        scanned, tokenized = guards._code_starts(line), guards._tokenized_starts(line)
        assert not isinstance(scanned, set)
        for p in range(len(line)):
            if line[p].isidentifier() and not (p and guards._WORD_OR_DOT.match(line, p - 1)):
                assert (p in scanned) == (p in tokenized), (line, p)
