#!/usr/bin/env python3
"""Generate Tandem's reference fixtures: tiny BPE tokenizers, tiny random
qwen3_moe / qwen3_next / qwen3_5_moe checkpoints built with transformers' own
classes, and oracle logits (one-pass prefill and prefill-then-decode).

Run (CPU only, float32, about a minute):

    python3 tools/reference/make_fixtures.py --out tests/fixtures

Needs: Python >= 3.10, torch, transformers (v5), tokenizers, safetensors, numpy.
No network access is needed or attempted.  See tools/reference/README.md for the
layout and formats of everything written.

The script is deliberately defensive: every assumption about the libraries is
checked, and a broken assumption stops the run (or, for checks that do not make
the files unusable, is reported at the end and turns the exit status to 1).
"""

from __future__ import annotations

import os

# Before torch / transformers / tokenizers are imported: CPU only, offline,
# deterministic tokenizer training.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

T0 = time.time()


def log(msg: str) -> None:
    print(f"[make_fixtures {time.time() - T0:6.1f}s] {msg}", flush=True)


class FixtureError(RuntimeError):
    """A broken assumption that makes the fixtures unusable: stop at once."""


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise FixtureError(msg)


# Checks that do not make the written files unusable but must not pass silently:
# collected here, printed at the end, exit status 1.
FAILURES: list[str] = []
WARNINGS: list[str] = []


def soft_fail(msg: str) -> None:
    log("FAILURE: " + msg)
    FAILURES.append(msg)


def warn(msg: str) -> None:
    log("WARNING: " + msg)
    WARNINGS.append(msg)


# ---------------------------------------------------------------------------
# Tokenizer definitions
# ---------------------------------------------------------------------------

# HF forms of the Qwen pre-tokenizer regexes (gguf-and-quants.md section 4.4).
# In tokenizer.json they appear as {"Regex": PATTERN}; "\r", "\n", "\s", "\p{L}"
# are regex escapes (backslash + letter), not control characters.
PRETOKENIZER_PATTERNS = {
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
    "qwen35": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
        r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENIZER_VOCAB_TARGET = 512  # total, including the 256 byte symbols and the 3 specials
TOKENIZER_VOCAB_MIN = 400
TOKENIZER_VOCAB_MAX = 600

# Built-in multilingual training text (no external data).  Precomposed and
# decomposed accents, CJK, emoji with modifiers and ZWJ, code, digits.
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the forest.
It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.
I'm sure they'll come back; we've waited long enough, and you're right that she'd have told us. Don't worry, it isn't late.
THEY'LL BE HERE SOON. WE'VE GOT TIME. I'M READY. You'Re sure? We'Ve checked.
In the beginning was the word, and the word was with the model, and the model predicted the next token.
Language models read text as tokens: words, pieces of words, bytes, and special markers.
A mixture of experts routes each token to a few experts; the router picks the top two of eight.
The recurrent state decays over time, while attention looks back at every earlier position.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 365 1024 2048 4096 65536 3.14159 2.71828 1,000,000 1e-6 0x7f 2024-05-17 12:30:45.
Prices rose 12.5% in 2023, from $1,299.99 to $1,462.49; the index closed at 18,432.10 points.
def forward(self, x):
    h = self.norm(x)
    return x + self.mlp(h)
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
if (x != y && z >= 0 || w <= 1) { return -1; } else { return x << 2; }
#include <vector>
std::vector<float> logits(vocab_size, 0.0f);
{"name": "tandem", "version": [0, 1, 0], "layers": 48, "experts": 128, "ok": true, "eps": 1e-06}
SELECT id, name FROM users WHERE age > 30 ORDER BY name;
    indented with four spaces
\tindented with a tab
		two tabs and trailing spaces   
Windows line ending\r
Blank lines follow.


Le café est très bon à Paris. Où est la bibliothèque? Déjà vu, naïve, résumé, façade, crème brûlée.
Le cafe\u0301 est tre\u0300s bon. De\u0301ja\u0300 vu, nai\u0308ve, re\u0301sume\u0301.
Der Bär läuft über die Straße. Schöne Grüße aus München! Äpfel, Öl, Übermut.
El niño comió piña en España; ¿dónde está el baño? ¡Qué bueno!
Tiếng Việt có nhiều dấu: Nguyễn, Trần, Lê, Phạm; người Việt Nam nói tiếng Việt.
Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 nhie\u0302\u0300u da\u0302\u0301u.
Decomposed again: cafe\u0301, the\u0301, e\u0301te\u0301, e\u0301cole, e\u0301toile, pre\u0301fe\u0301re\u0301, re\u0301sume\u0301, Cafe\u0301.
More decomposed: pe\u0300re, me\u0300re, fre\u0300re, ou\u0300, la\u0300, de\u0301ja\u0300, a\u0300 bientôt, cre\u0300me, bru\u0302le\u0301e.
Decomposed German: nai\u0308ve, U\u0308ber, u\u0308ber, scho\u0308n, Ko\u0308ln, fu\u0308r, Ma\u0308dchen, Gru\u0308\u00dfe, A\u0308pfel.
Decomposed Vietnamese: Nguye\u0302\u0303n, Vie\u0323\u0302t Nam, tie\u0302\u0301ng, nhie\u0302\u0300u, da\u0302\u0301u, co\u0301, la\u0300, kho\u0302ng.
Cafe\u0301 cafe\u0301 the\u0301 the\u0301 e\u0301te\u0301 e\u0301te\u0301 re\u0301sume\u0301 nai\u0308ve nai\u0308ve u\u0308ber u\u0308ber.
Привет, мир! Как дела? Москва, Санкт-Петербург, Новосибирск. Это тест.
Γειά σου κόσμε! Η γλώσσα είναι ελληνική. Αθήνα, Θεσσαλονίκη.
مرحبا بالعالم. اللغة العربية جميلة. شكرا لك.
שלום עולם. זה מבחן של טקסט בעברית.
नमस्ते दुनिया। यह हिंदी में एक वाक्य है।
你好，世界！今天天气很好。我们一起学习语言模型。中文分词是一个有趣的问题。
人工智能正在改变世界，专家混合模型把每个词元送到少数几个专家。
日本語のテキストです。ひらがな、カタカナ、漢字を使います。東京は大きな都市です。
한국어 문장입니다. 서울은 대한민국의 수도입니다. 감사합니다.
ภาษาไทยเป็นภาษาที่สวยงาม
Emoji: 😀 😃 😄 😁 😂 🤣 😊 🙂 🙃 😉 🎉 🎈 🌊 🌍 🚀 ✨ ❤️ 👍 👎 🙏
Skin tones: 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 👋🏻 👋🏽 👋🏿
Families and ZWJ: 👨‍👩‍👧‍👦 👩‍💻 👨‍🚀 🏳️‍🌈 ❤️‍🔥 🧑‍🤝‍🧑
Flags: 🇺🇸 🇯🇵 🇫🇷 🇩🇪 🇧🇷 🇨🇳
Symbols: © ® ™ § ¶ † ‡ • … ‰ ′ ″ € £ ¥ ₹ ∞ ≈ ≠ ≤ ≥ ± × ÷ √ ∑ ∏ ∫ ∂ ∇ → ← ↑ ↓ ⇒ ⇔
Punctuation runs: !!! ??? ... --- *** ### === +++ ~~~ ((( ))) [[[ ]]] {{{ }}} <<< >>> /// \\\\\\ ||| &&&
URLs: https://example.com/path/to/page?query=1&lang=en#section and mailto:someone@example.org
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
The capital of France is Paris.<|im_end|>
<|endoftext|>
"""

# Hard strings for the tokenizer cases (each tokenizer encodes every one).
TOKENIZER_CASES = [
    "",
    "Hello, world!",
    "hello world",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "trailing newline then spaces\n   ",
    "I'm here, you're there; THEY'LL go, we've gone, she'd say, it's OK, DON'T.",
    "I'M SHOUTING, i'm not, I'm Mixed, WE'VE, We'Ve, they'Ll, 'S 'T 'RE 'VE 'M 'LL 'D",
    "'s't're've'm'll'd",
    "The year 2024 had 366 days; pi = 3.14159265358979 and 12345678901234567890.",
    "Numbers: 0 00 007 1,234,567.89 1e-10 0x1F 3/4 ½ ² Ⅻ ٣ ३ 一二三",
    "tabs\tand\t\tmore\ttabs",
    "line1\nline2\n\nline4\r\nline5\r\n\r\n",
    "mixed   \n  \t indentation\n    four spaces\n\ttab",
    "\n\n\n",
    "    ",
    " \t \n \r\n ",
    "a\u00a0b\u2009c\u3000d\u2028e",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if x!=y&&z>=0||w<=1: pass  # comment\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "!!! ??? ... --- *** ### $$$ %%% ^^^ ((( ))) \\\\ // ||",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "Γειά σου κόσμε",
    "Emoji: 😀😃😄 👍 🎉 🌊",
    "Skin tones: 👍🏻 👍🏽 👍🏿 👋🏼",
    "ZWJ: 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 ❤️‍🔥",
    "Flags: 🇺🇸🇯🇵🇫🇷",
    "Precomposed: Café résumé naïve",
    "Decomposed: Cafe\u0301 re\u0301sume\u0301 nai\u0308ve",
    "Tiếng Việt: Nguyễn Trần",
    "Tie\u0302\u0301ng Vie\u0323\u0302t: Nguye\u0302\u0303n",
    "\u0301\u0302 lone combining marks a\u0300\u0301\u0302",
    "cafe\u0301 the\u0301 e\u0301te\u0301 pre\u0301fe\u0301re\u0301 e\u0301cole",
    "la\u0300 de\u0301ja\u0300 a\u0300 pe\u0300re cre\u0300me",
    "nai\u0308ve u\u0308ber U\u0308ber scho\u0308n Ko\u0308ln",
    "Vie\u0323\u0302t Nam: tie\u0302\u0301ng nhie\u0302\u0300u da\u0302\u0301u",
    "Z\u0351\u036b\u0343a\u0310l\u0352g\u0344o",
    "Mixed: English 中文 русский العربية 123 😀 café",
    "URL: https://example.com/path?q=1&r=two#frag email: someone@example.org",
    "CamelCaseIdentifier snake_case_name kebab-case-name SCREAMING_CASE",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "zero\u200bwidth \ufeffBOM and\u00adsoft hyphen",
    "control\x07bell and\x7fdel",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text<|im_end|><|im_start|>",
    "<|im_start|><|im_end|>",
    "<|im_start |> not special <|im_end",
]

# Prompt for the oracle logits; its token ids are truncated to at most
# PROMPT_MAX_TOKENS (and must be at least PROMPT_MIN_TOKENS).
ORACLE_PROMPT = (
    "<|im_start|>user\nIn one line: why is the sea blue? It's light, I'm told; "
    "déjà vu, 你好 🌊 42.<|im_end|>\n<|im_start|>assistant\nThe sea looks blue because"
)
PROMPT_MIN_TOKENS = 24
PROMPT_MAX_TOKENS = 40


def utf8_hex(s: str) -> str:
    return s.encode("utf-8").hex()


def split_on_specials(text: str, specials: list[str]) -> list[tuple[str, bool]]:
    """Split text into (segment, is_special) the way an added-vocabulary
    pass does: leftmost match, longest special first at a position."""
    out: list[tuple[str, bool]] = []
    by_len = sorted(specials, key=len, reverse=True)
    i = 0
    start = 0
    while i < len(text):
        hit = None
        for s in by_len:
            if text.startswith(s, i):
                hit = s
                break
        if hit is None:
            i += 1
            continue
        if start < i:
            out.append((text[start:i], False))
        out.append((hit, True))
        i += len(hit)
        start = i
    if start < len(text):
        out.append((text[start:], False))
    return out


def build_tokenizers(out_dir: Path) -> dict:
    """Train the two tokenizers, save them, write cases.json.  Returns
    {pre_name: {"tokenizer": Tokenizer, "vocab_size": int, "special_ids": {...}}}."""
    try:
        import tokenizers
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    except Exception as e:  # pragma: no cover - environment problem
        raise FixtureError(f"cannot import the tokenizers library: {e!r}")
    log(f"tokenizers {tokenizers.__version__}")

    tok_root = out_dir / "tokenizer"
    if tok_root.exists():
        shutil.rmtree(tok_root)
    tok_root.mkdir(parents=True)

    # Chunks of four lines, line ends kept (so that newline and CR/LF runs get merges).
    lines = TRAINING_TEXT.splitlines(keepends=True)
    corpus = ["".join(lines[i : i + 4]) for i in range(0, len(lines), 4)]
    # A few repetitions so that pairs across the whole text reach min_frequency.
    corpus = corpus * 3
    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    require(len(byte_alphabet) == 256, f"ByteLevel.alphabet() has {len(byte_alphabet)} symbols, expected 256")

    result: dict = {}
    cases_json: dict = {
        "format": 1,
        "description": "Tandem tokenizer cases: ids from HF tokenizers encode(text) with special tokens "
        "recognised (the library default), no normalizer.",
        "tokenizers_version": tokenizers.__version__,
        "tokenizers": {},
    }

    for pre_name, pattern in PRETOKENIZER_PATTERNS.items():
        log(f"training tokenizer '{pre_name}' (target vocab {TOKENIZER_VOCAB_TARGET})")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=TOKENIZER_VOCAB_TARGET,
            min_frequency=2,
            show_progress=False,
            special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
            initial_alphabet=byte_alphabet,
        )
        tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))

        # Canonical JSON: exactly the Qwen tokenizer.json layout for these parts,
        # but with no normalizer (real Qwen tokenizer.json files declare NFC).
        j = json.loads(tok.to_str())
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        j["normalizer"] = None
        j["pre_tokenizer"] = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                dict(byte_level),
            ],
        }
        j["post_processor"] = dict(byte_level)
        j["decoder"] = dict(byte_level)
        require(j.get("model", {}).get("type") == "BPE", f"trained model is not BPE: {j.get('model', {}).get('type')}")
        canon = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))

        tok_dir = tok_root / pre_name
        tok_dir.mkdir(parents=True)
        path = tok_dir / "tokenizer.json"
        canon.save(str(path), pretty=True)
        saved = Tokenizer.from_file(str(path))

        # --- checks on what was saved ---
        sj = json.loads(path.read_text(encoding="utf-8"))
        require(sj.get("normalizer") is None, "saved tokenizer.json has a normalizer")
        pt = sj.get("pre_tokenizer") or {}
        require(
            pt.get("type") == "Sequence"
            and len(pt.get("pretokenizers", [])) == 2
            and pt["pretokenizers"][0].get("type") == "Split"
            and pt["pretokenizers"][0].get("pattern", {}).get("Regex") == pattern
            and pt["pretokenizers"][0].get("behavior") == "Isolated"
            and pt["pretokenizers"][1].get("type") == "ByteLevel"
            and pt["pretokenizers"][1].get("use_regex") is False
            and pt["pretokenizers"][1].get("add_prefix_space") is False,
            f"saved pre_tokenizer is not the expected Sequence[Split, ByteLevel]: {json.dumps(pt)[:400]}",
        )
        require((sj.get("decoder") or {}).get("type") == "ByteLevel", "saved decoder is not ByteLevel")
        added = {a["content"]: a for a in sj.get("added_tokens", [])}
        special_ids = {}
        for s in SPECIAL_TOKENS:
            require(s in added, f"special token {s} missing from added_tokens of {pre_name}")
            require(added[s].get("special") is True, f"special token {s} is not marked special in {pre_name}")
            tid = saved.token_to_id(s)
            require(tid is not None and tid == added[s]["id"], f"special token {s}: id mismatch")
            special_ids[s] = tid
        vocab_size = saved.get_vocab_size(with_added_tokens=True)
        require(
            TOKENIZER_VOCAB_MIN <= vocab_size <= TOKENIZER_VOCAB_MAX,
            f"tokenizer {pre_name} has vocab {vocab_size}, outside [{TOKENIZER_VOCAB_MIN}, {TOKENIZER_VOCAB_MAX}]",
        )
        vocab = saved.get_vocab(with_added_tokens=True)
        require(sorted(vocab.values()) == list(range(vocab_size)), f"tokenizer {pre_name}: ids are not 0..V-1")
        for ch in byte_alphabet:
            require(ch in vocab, f"tokenizer {pre_name}: byte symbol {ch!r} missing from vocab")
        merges = sj["model"].get("merges", [])
        merges_form = "pairs" if merges and isinstance(merges[0], list) else "strings"
        log(
            f"  {pre_name}: vocab {vocab_size} ({len(merges)} merges, stored as {merges_form}), "
            f"specials {special_ids}"
        )

        # Pre-tokenizer split alone (raw-text pieces) for debugging the regex.
        splitter = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)

        cases = []
        for text in TOKENIZER_CASES:
            enc = saved.encode(text)
            enc_py = tok.encode(text)  # the Python-API-built tokenizer must agree
            if list(enc.ids) != list(enc_py.ids):
                raise FixtureError(
                    f"{pre_name}: canonical tokenizer.json and trained tokenizer disagree on {text!r}: "
                    f"{enc.ids} vs {enc_py.ids}"
                )
            pieces: list[str] = []
            for seg, is_special in split_on_specials(text, SPECIAL_TOKENS):
                if is_special:
                    pieces.append(seg)
                else:
                    pieces.extend(p for p, _ in splitter.pre_tokenize_str(seg))
            decoded = saved.decode(list(enc.ids), skip_special_tokens=False)
            if decoded != text:
                soft_fail(f"tokenizer {pre_name}: decode(encode(x)) != x for {text!r}: got {decoded!r}")
            require(all(0 <= i < vocab_size for i in enc.ids), f"{pre_name}: id out of range for {text!r}")
            cases.append(
                {
                    "text": text,
                    "text_utf8_hex": utf8_hex(text),
                    "ids": list(enc.ids),
                    "tokens": list(enc.tokens),
                    "pieces": pieces,
                }
            )
        require(len(cases) >= 30, "fewer than 30 tokenizer cases")
        n_multi = sum(1 for c in cases if len(c["ids"]) > 1)
        log(f"  {pre_name}: {len(cases)} cases, {sum(len(c['ids']) for c in cases)} ids in all")
        require(n_multi >= 20, f"{pre_name}: suspiciously few multi-token cases ({n_multi})")

        cases_json["tokenizers"][pre_name] = {
            "file": f"{pre_name}/tokenizer.json",
            "pre": pre_name,
            "pattern": pattern,
            "vocab_size": vocab_size,
            "n_merges": len(merges),
            "merges_form": merges_form,
            "normalizer": None,
            "special_tokens": special_ids,
            "cases": cases,
        }
        result[pre_name] = {"tokenizer": saved, "vocab_size": vocab_size, "special_ids": special_ids}

    # A tokenizer that applied the other regex to this vocabulary must fail some
    # cases, or the cases could not tell the two pre-tokenizers apart.
    sensitive: dict[str, list[str]] = {}
    for pre_name, other in (("qwen35", "qwen2"), ("qwen2", "qwen35")):
        jj = json.loads(result[pre_name]["tokenizer"].to_str())
        jj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = PRETOKENIZER_PATTERNS[other]
        wrong = Tokenizer.from_str(json.dumps(jj, ensure_ascii=False))
        sensitive[pre_name] = [
            c["text"] for c in cases_json["tokenizers"][pre_name]["cases"] if list(wrong.encode(c["text"]).ids) != c["ids"]
        ]
        log(f"  {pre_name} vocabulary with the {other} regex changes {len(sensitive[pre_name])} cases: {sensitive[pre_name]!r}")
    if len(sensitive["qwen35"]) < 3:
        soft_fail(
            f"only {len(sensitive['qwen35'])} qwen35 cases change under the qwen2 regex (need >= 3): "
            "the cases cannot catch a wrong pre-tokenizer"
        )
    cases_json["wrong_regex_sensitive_cases"] = sensitive
    # The two regexes must actually differ on combining-mark text.
    p2 = [p for p, _ in pre_tokenizers.Split(Regex(PRETOKENIZER_PATTERNS["qwen2"]), "isolated").pre_tokenize_str("Cafe\u0301!")]
    p35 = [p for p, _ in pre_tokenizers.Split(Regex(PRETOKENIZER_PATTERNS["qwen35"]), "isolated").pre_tokenize_str("Cafe\u0301!")]
    log(f"  split of 'Cafe\\u0301!': qwen2 {p2!r}, qwen35 {p35!r}")
    require(p2 != p35, "qwen2 and qwen35 regexes split decomposed text identically: \\p{M} handling not effective")

    cases_path = tok_root / "cases.json"
    cases_path.write_text(json.dumps(cases_json, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {cases_path} ({cases_path.stat().st_size} bytes)")
    return result


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
N_EXPERTS = 8
TOP_K = 2
MOE_INTER = 32
SHARED_INTER = 32
DENSE_INTER = 64
MAX_POS = 4096
RMS_EPS = 1e-6
PARTIAL_ROTARY = 0.25
ROT_DIM = int(HEAD_DIM * PARTIAL_ROTARY)  # 8
MROPE_SECTION = [2, 1, 1]  # sums to ROT_DIM / 2
LIN_K_HEADS = 2
LIN_V_HEADS = 4
LIN_K_DIM = 32
LIN_V_DIM = 32
CONV_K = 4
HYBRID_LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "full_attention"]

MODEL_SPECS = {
    "qwen3_moe": {
        "tokenizer": "qwen2",
        "config_class": "Qwen3MoeConfig",
        "model_class": "Qwen3MoeForCausalLM",
        "module": "transformers.models.qwen3_moe",
        "hf_model_type": "qwen3_moe",
        "rope_theta": 1_000_000.0,
        "n_layers": 3,
    },
    "qwen3_next": {
        "tokenizer": "qwen2",
        "config_class": "Qwen3NextConfig",
        "model_class": "Qwen3NextForCausalLM",
        "module": "transformers.models.qwen3_next",
        "hf_model_type": "qwen3_next",
        "rope_theta": 10_000_000.0,
        "n_layers": 4,
    },
    "qwen3_5_moe": {
        "tokenizer": "qwen35",
        "config_class": "Qwen3_5MoeTextConfig",
        "model_class": "Qwen3_5MoeForCausalLM",
        "module": "transformers.models.qwen3_5_moe",
        "hf_model_type": "qwen3_5_moe_text",
        "rope_theta": 10_000_000.0,
        "n_layers": 4,
    },
}


def get_transformers_class(name: str, module: str):
    import importlib

    import transformers

    cls = getattr(transformers, name, None)
    if cls is None:
        try:
            mod = importlib.import_module(module)
            cls = getattr(mod, name, None)
        except Exception as e:
            raise FixtureError(f"transformers {transformers.__version__}: cannot import {module}: {e!r}")
    if cls is None:
        raise FixtureError(
            f"transformers {transformers.__version__} has no class {name} "
            f"(neither transformers.{name} nor {module}.{name}); this script needs transformers v5 "
            f"with qwen3_moe, qwen3_next and qwen3_5_moe (text-only Qwen3_5MoeForCausalLM)."
        )
    return cls


def config_kwargs(model_type: str, vocab_size: int, special_ids: dict) -> dict:
    spec = MODEL_SPECS[model_type]
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=spec["n_layers"],
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        hidden_act="silu",
        max_position_embeddings=MAX_POS,
        initializer_range=0.02,
        rms_norm_eps=RMS_EPS,
        use_cache=True,
        tie_word_embeddings=False,
        attention_bias=False,
        attention_dropout=0.0,
        moe_intermediate_size=MOE_INTER,
        num_experts=N_EXPERTS,
        num_experts_per_tok=TOP_K,
        bos_token_id=special_ids["<|endoftext|>"],
        eos_token_id=special_ids["<|im_end|>"],
        pad_token_id=None,
    )
    if model_type == "qwen3_moe":
        kw.update(
            intermediate_size=DENSE_INTER,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": spec["rope_theta"]},
        )
    elif model_type == "qwen3_next":
        kw.update(
            intermediate_size=DENSE_INTER,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            shared_expert_intermediate_size=SHARED_INTER,
            linear_conv_kernel_dim=CONV_K,
            linear_key_head_dim=LIN_K_DIM,
            linear_value_head_dim=LIN_V_DIM,
            linear_num_key_heads=LIN_K_HEADS,
            linear_num_value_heads=LIN_V_HEADS,
            layer_types=list(HYBRID_LAYER_TYPES),
            rope_parameters={
                "rope_type": "default",
                "rope_theta": spec["rope_theta"],
                "partial_rotary_factor": PARTIAL_ROTARY,
            },
        )
    elif model_type == "qwen3_5_moe":
        kw.update(
            shared_expert_intermediate_size=SHARED_INTER,
            linear_conv_kernel_dim=CONV_K,
            linear_key_head_dim=LIN_K_DIM,
            linear_value_head_dim=LIN_V_DIM,
            linear_num_key_heads=LIN_K_HEADS,
            linear_num_value_heads=LIN_V_HEADS,
            layer_types=list(HYBRID_LAYER_TYPES),
            rope_parameters={
                "rope_type": "default",
                "rope_theta": spec["rope_theta"],
                "partial_rotary_factor": PARTIAL_ROTARY,
                "mrope_section": list(MROPE_SECTION),
                "mrope_interleaved": True,
            },
        )
    else:
        raise FixtureError(f"unknown model type {model_type}")
    return kw


def construct_config(cfg_cls, kwargs: dict):
    """Build the config.  A keyword the class refuses is set as an attribute
    afterwards (and reported); the model's shapes are checked later anyway."""
    kw = dict(kwargs)
    late: dict = {}
    for _ in range(len(kwargs) + 1):
        try:
            cfg = cfg_cls(**kw)
            break
        except TypeError as e:
            m = re.search(r"unexpected keyword argument '([^']+)'", str(e))
            if not m or m.group(1) not in kw:
                raise FixtureError(f"{cfg_cls.__name__}(**kwargs) failed: {e!r}")
            key = m.group(1)
            warn(f"{cfg_cls.__name__} does not take '{key}' as a keyword; setting it as an attribute")
            late[key] = kw.pop(key)
        except Exception as e:
            raise FixtureError(f"{cfg_cls.__name__}(**{kw}) failed: {e!r}")
    else:
        raise FixtureError(f"could not construct {cfg_cls.__name__}")
    for k, v in late.items():
        setattr(cfg, k, v)
    return cfg


def find_layers(model):
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    require(layers is not None, f"{type(model).__name__}: no model.layers")
    return inner, layers


def check_structure(model_type: str, model, cfg) -> dict:
    """Assert that the instantiated module tree has exactly the intended shapes.
    Returns a summary (layer kinds, expert storage form)."""
    import torch

    spec = MODEL_SPECS[model_type]
    inner, layers = find_layers(model)
    require(len(layers) == spec["n_layers"], f"{model_type}: {len(layers)} layers, expected {spec['n_layers']}")
    V = cfg.vocab_size
    require(tuple(inner.embed_tokens.weight.shape) == (V, HIDDEN), f"embed_tokens shape {tuple(inner.embed_tokens.weight.shape)}")
    require(tuple(model.lm_head.weight.shape) == (V, HIDDEN), f"lm_head shape {tuple(model.lm_head.weight.shape)}")
    require(
        model.lm_head.weight.data_ptr() != inner.embed_tokens.weight.data_ptr(),
        "lm_head is tied to embed_tokens (tie_word_embeddings must be False)",
    )
    kinds = []
    expert_forms = set()
    for i, layer in enumerate(layers):
        has_lin = hasattr(layer, "linear_attn")
        has_att = hasattr(layer, "self_attn")
        require(has_lin != has_att, f"layer {i}: linear_attn={has_lin}, self_attn={has_att}")
        kind = "linear_attention" if has_lin else "full_attention"
        kinds.append(kind)
        if kind == "full_attention":
            a = layer.self_attn
            gated = model_type != "qwen3_moe"
            q_out = HEADS * HEAD_DIM * (2 if gated else 1)
            require(tuple(a.q_proj.weight.shape) == (q_out, HIDDEN), f"layer {i} q_proj {tuple(a.q_proj.weight.shape)} != {(q_out, HIDDEN)}")
            require(tuple(a.k_proj.weight.shape) == (KV_HEADS * HEAD_DIM, HIDDEN), f"layer {i} k_proj {tuple(a.k_proj.weight.shape)}")
            require(tuple(a.v_proj.weight.shape) == (KV_HEADS * HEAD_DIM, HIDDEN), f"layer {i} v_proj {tuple(a.v_proj.weight.shape)}")
            require(tuple(a.o_proj.weight.shape) == (HIDDEN, HEADS * HEAD_DIM), f"layer {i} o_proj {tuple(a.o_proj.weight.shape)}")
            require(tuple(a.q_norm.weight.shape) == (HEAD_DIM,), f"layer {i} q_norm {tuple(a.q_norm.weight.shape)}")
            require(tuple(a.k_norm.weight.shape) == (HEAD_DIM,), f"layer {i} k_norm {tuple(a.k_norm.weight.shape)}")
            for b in ("q_proj", "k_proj", "v_proj", "o_proj"):
                require(getattr(a, b).bias is None, f"layer {i} {b} has a bias")
        else:
            g = layer.linear_attn
            key_dim = LIN_K_HEADS * LIN_K_DIM
            value_dim = LIN_V_HEADS * LIN_V_DIM
            conv_dim = 2 * key_dim + value_dim
            require(tuple(g.conv1d.weight.shape) == (conv_dim, 1, CONV_K), f"layer {i} conv1d {tuple(g.conv1d.weight.shape)}")
            require(g.conv1d.bias is None, f"layer {i} conv1d has a bias")
            require(tuple(g.A_log.shape) == (LIN_V_HEADS,), f"layer {i} A_log {tuple(g.A_log.shape)}")
            require(tuple(g.dt_bias.shape) == (LIN_V_HEADS,), f"layer {i} dt_bias {tuple(g.dt_bias.shape)}")
            require(tuple(g.norm.weight.shape) == (LIN_V_DIM,), f"layer {i} linear_attn.norm {tuple(g.norm.weight.shape)}")
            require(tuple(g.out_proj.weight.shape) == (HIDDEN, value_dim), f"layer {i} out_proj {tuple(g.out_proj.weight.shape)}")
            if model_type == "qwen3_next":
                require(
                    tuple(g.in_proj_qkvz.weight.shape) == (2 * key_dim + 2 * value_dim, HIDDEN),
                    f"layer {i} in_proj_qkvz {tuple(g.in_proj_qkvz.weight.shape)}",
                )
                require(tuple(g.in_proj_ba.weight.shape) == (2 * LIN_V_HEADS, HIDDEN), f"layer {i} in_proj_ba {tuple(g.in_proj_ba.weight.shape)}")
            else:
                require(tuple(g.in_proj_qkv.weight.shape) == (conv_dim, HIDDEN), f"layer {i} in_proj_qkv {tuple(g.in_proj_qkv.weight.shape)}")
                require(tuple(g.in_proj_z.weight.shape) == (value_dim, HIDDEN), f"layer {i} in_proj_z {tuple(g.in_proj_z.weight.shape)}")
                require(tuple(g.in_proj_b.weight.shape) == (LIN_V_HEADS, HIDDEN), f"layer {i} in_proj_b {tuple(g.in_proj_b.weight.shape)}")
                require(tuple(g.in_proj_a.weight.shape) == (LIN_V_HEADS, HIDDEN), f"layer {i} in_proj_a {tuple(g.in_proj_a.weight.shape)}")
        mlp = layer.mlp
        require(hasattr(mlp, "gate") and hasattr(mlp, "experts"), f"layer {i}: mlp is not a sparse MoE block ({type(mlp).__name__})")
        gw = mlp.gate.weight
        require(tuple(gw.shape) == (N_EXPERTS, HIDDEN), f"layer {i} router weight {tuple(gw.shape)}")
        ex = mlp.experts
        if isinstance(getattr(ex, "gate_up_proj", None), torch.nn.Parameter):
            gu, dn = ex.gate_up_proj, ex.down_proj
            if tuple(gu.shape) == (N_EXPERTS, 2 * MOE_INTER, HIDDEN) and tuple(dn.shape) == (N_EXPERTS, HIDDEN, MOE_INTER):
                expert_forms.add("fused_out_in")
            elif tuple(gu.shape) == (N_EXPERTS, HIDDEN, 2 * MOE_INTER) and tuple(dn.shape) == (N_EXPERTS, MOE_INTER, HIDDEN):
                expert_forms.add("fused_in_out")
            else:
                raise FixtureError(f"layer {i}: unexpected fused expert shapes {tuple(gu.shape)} / {tuple(dn.shape)}")
        elif isinstance(ex, torch.nn.ModuleList):
            require(len(ex) == N_EXPERTS, f"layer {i}: {len(ex)} experts")
            require(tuple(ex[0].gate_proj.weight.shape) == (MOE_INTER, HIDDEN), f"layer {i}: expert gate_proj {tuple(ex[0].gate_proj.weight.shape)}")
            expert_forms.add("modulelist")
        else:
            raise FixtureError(f"layer {i}: unknown experts module {type(ex).__name__}")
        has_shared = hasattr(mlp, "shared_expert")
        if model_type == "qwen3_moe":
            require(not has_shared, f"layer {i}: qwen3_moe has a shared expert")
        else:
            require(has_shared and hasattr(mlp, "shared_expert_gate"), f"layer {i}: no shared expert / shared_expert_gate")
            require(tuple(mlp.shared_expert.gate_proj.weight.shape) == (SHARED_INTER, HIDDEN), f"layer {i}: shared gate_proj shape")
            require(tuple(mlp.shared_expert_gate.weight.shape) == (1, HIDDEN), f"layer {i}: shared_expert_gate shape")
    if model_type == "qwen3_moe":
        require(all(k == "full_attention" for k in kinds), f"qwen3_moe layer kinds {kinds}")
    else:
        require(kinds == HYBRID_LAYER_TYPES, f"{model_type} layer kinds {kinds} != {HYBRID_LAYER_TYPES}")
        lt = list(getattr(cfg, "layer_types", []) or [])
        require(lt == HYBRID_LAYER_TYPES, f"{model_type} config.layer_types {lt}")
    require(len(expert_forms) == 1, f"mixed expert storage forms {expert_forms}")

    # RoPE: inverse frequencies must be theta^(-2i/rot_dim) over the rotary slice.
    rot = getattr(inner, "rotary_emb", None)
    require(rot is not None and hasattr(rot, "inv_freq"), f"{model_type}: model.rotary_emb.inv_freq not found")
    rot_dim = HEAD_DIM if model_type == "qwen3_moe" else ROT_DIM
    theta = spec["rope_theta"]
    expect = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    got = rot.inv_freq.detach().to(torch.float64).cpu()
    require(tuple(got.shape) == (rot_dim // 2,), f"{model_type}: inv_freq shape {tuple(got.shape)}, expected ({rot_dim // 2},)")
    require(torch.allclose(got, expect, rtol=1e-5, atol=0.0), f"{model_type}: inv_freq {got.tolist()} != {expect.tolist()}")
    if model_type == "qwen3_5_moe":
        ms = getattr(rot, "mrope_section", None)
        if ms is not None:
            require(list(ms) == MROPE_SECTION, f"rotary_emb.mrope_section {ms} != {MROPE_SECTION}")
    return {"layer_types": kinds, "expert_storage_in_memory": next(iter(expert_forms)), "rot_dim": rot_dim}


def classify_norms(model_type: str, model) -> dict:
    """Find every RMSNorm-like module and classify it by probing its forward:
    'plain' (y = w * norm(x)), 'zero_centred' (y = (1 + w) * norm(x)) or
    'gated' (y = w * norm(x) * silu(z), the GDN output norm)."""
    import torch
    import torch.nn.functional as F

    result = {}
    g = torch.Generator().manual_seed(99)
    for name, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if not isinstance(w, torch.nn.Parameter) or w.dim() != 1 or "norm" not in type(mod).__name__.lower():
            continue
        dim = w.shape[0]
        x = torch.randn(3, dim, generator=g)
        eps = RMS_EPS
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        saved = w.detach().clone()
        with torch.no_grad():
            if "gated" in type(mod).__name__.lower():
                z = torch.randn(3, dim, generator=g)
                w.fill_(1.0)
                y = mod(x, z)
                ok = torch.allclose(y, normed * F.silu(z), rtol=1e-5, atol=1e-6)
                w.copy_(saved)
                require(ok, f"{name} ({type(mod).__name__}): gated norm does not compute norm(x) * w * silu(z)")
                kind = "gated"
            else:
                w.zero_()
                y = mod(x)
                w.copy_(saved)
                if float(y.abs().max()) < 1e-12:
                    kind = "plain"
                elif torch.allclose(y, normed, rtol=1e-5, atol=1e-6):
                    kind = "zero_centred"
                else:
                    raise FixtureError(f"{name} ({type(mod).__name__}): norm behaviour not recognised")
        result[name] = (kind, mod)
    require(result, f"{model_type}: no norm modules found")
    for name, (kind, _) in result.items():
        if model_type == "qwen3_moe":
            require(kind == "plain", f"{model_type}: {name} is {kind}, expected plain RMSNorm")
        elif name.endswith("linear_attn.norm"):
            require(kind == "gated", f"{model_type}: {name} is {kind}, expected gated")
        else:
            require(kind == "zero_centred", f"{model_type}: {name} is {kind}, expected zero-centred (1 + w)")
    return result


def init_weights(model_type: str, model, gen, a_range: tuple[float, float], router_scale: float) -> dict:
    """Overwrite every parameter with a deterministic, well-scaled value."""
    import torch

    norms = classify_norms(model_type, model)
    done: set[str] = set()
    counts: dict[str, int] = {}

    def mark(name: str, what: str) -> None:
        done.add(name)
        counts[what] = counts.get(what, 0) + 1

    with torch.no_grad():
        for mname, (kind, mod) in norms.items():
            pname = f"{mname}.weight" if mname else "weight"
            w = mod.weight
            noise = torch.randn(w.shape, generator=gen) * 0.2
            if kind == "zero_centred":
                w.copy_(noise)
            else:
                w.copy_(1.0 + noise)
            mark(pname, f"norm_{kind}")

        for name, p in model.named_parameters():
            if name in done:
                continue
            shape = tuple(p.shape)
            if name.endswith("A_log"):
                lo, hi = a_range
                p.copy_(torch.empty(shape).uniform_(lo, hi, generator=gen).log())
                mark(name, "A_log")
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(shape).uniform_(0.5, 1.5, generator=gen))
                mark(name, "dt_bias")
            elif name.endswith("conv1d.weight"):
                require(len(shape) == 3 and shape[1] == 1, f"{name}: conv weight shape {shape}")
                p.copy_(torch.randn(shape, generator=gen) / math.sqrt(shape[2]))
                mark(name, "conv1d")
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(shape, generator=gen))
                mark(name, "embedding")
            elif name.endswith("experts.gate_up_proj"):
                require(len(shape) == 3, f"{name}: shape {shape}")
                p.copy_(torch.randn(shape, generator=gen) / math.sqrt(HIDDEN))
                mark(name, "experts_fused")
            elif name.endswith("experts.down_proj"):
                require(len(shape) == 3, f"{name}: shape {shape}")
                p.copy_(torch.randn(shape, generator=gen) / math.sqrt(MOE_INTER))
                mark(name, "experts_fused")
            elif re.search(r"(^|\.)mlp\.gate\.weight$", name):
                require(shape == (N_EXPERTS, HIDDEN), f"{name}: router shape {shape}")
                p.copy_(torch.randn(shape, generator=gen) * (router_scale / math.sqrt(HIDDEN)))
                mark(name, "router")
            elif len(shape) == 2:
                p.copy_(torch.randn(shape, generator=gen) / math.sqrt(shape[1]))
                mark(name, "linear")
            else:
                raise FixtureError(f"{model_type}: parameter {name} {shape} has no init rule")
        for name, p in model.named_parameters():
            require(name in done, f"{model_type}: parameter {name} was not initialised")
            require(bool(torch.isfinite(p).all()), f"{model_type}: parameter {name} is not finite")
    return counts


class RouterProbe:
    """Forward hooks on every MoE router: recompute the router logits from the
    router's input and check them against the router's own top-k choice."""

    def __init__(self, layers):
        self.handles = []
        self.records: dict[int, list] = {}
        self.enabled = False
        self.mismatch: list[str] = []
        for i, layer in enumerate(layers):
            gate = layer.mlp.gate
            self.handles.append(gate.register_forward_hook(self._make_hook(i), with_kwargs=True))

    def _make_hook(self, idx):
        import torch
        import torch.nn.functional as F

        def hook(mod, args, kwargs, output):
            if not self.enabled:
                return
            x = args[0] if args else next(iter(kwargs.values()))
            x = x.reshape(-1, mod.weight.shape[1]).detach()
            logits = F.linear(x, mod.weight.detach()).float()
            self.records.setdefault(idx, []).append(logits)
            if isinstance(output, (tuple, list)) and len(output) >= 3 and torch.is_tensor(output[2]):
                chosen = output[2].reshape(logits.shape[0], -1)
                mine = torch.topk(logits, chosen.shape[1], dim=-1).indices
                if not torch.equal(torch.sort(chosen, dim=-1).values, torch.sort(mine, dim=-1).values):
                    self.mismatch.append(f"layer {idx}: router indices differ from top-k of recomputed logits")

        return hook

    def summary(self, top_k: int) -> dict:
        import torch

        min_margin = float("inf")
        distinct = {}
        for idx, recs in sorted(self.records.items()):
            logits = torch.cat(recs, dim=0)
            srt = torch.sort(logits, dim=-1, descending=True).values
            margin = float((srt[:, top_k - 1] - srt[:, top_k]).min())
            min_margin = min(min_margin, margin)
            sel = torch.topk(logits, top_k, dim=-1).indices
            distinct[idx] = sorted(set(int(v) for v in sel.flatten().tolist()))
        return {"min_topk_margin": min_margin, "distinct_experts": distinct}

    def clear(self):
        self.records = {}

    def remove(self):
        for h in self.handles:
            h.remove()


def set_eager(model) -> str:
    try:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        else:
            model.config._attn_implementation = "eager"
    except Exception as e:
        warn(f"could not select eager attention: {e!r}")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        warn(f"attention implementation is {impl!r}, not 'eager'")
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:
            warn(f"set_experts_implementation('eager') failed: {e!r} (keeping the default)")
    return str(impl)


def force_torch_gdn(model) -> None:
    """Make sure no external fast kernels (fla, causal-conv1d) are used on CPU:
    they would not run there, and the oracle must be the torch reference."""
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("GatedDeltaNet"):
            norm_cls = type(getattr(mod, "norm", None)).__name__
            require("Fused" not in norm_cls, f"{name}: GDN output norm is {norm_cls} (fla installed?); needs the torch RMSNormGated")
            for attr in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule", "recurrent_gated_delta_rule"):
                fn = getattr(mod, attr, None)
                if fn is None:
                    continue
                modname = getattr(fn, "__module__", "") or ""
                if modname.startswith(("fla", "causal_conv1d")):
                    raise FixtureError(f"{name}.{attr} is {modname}.{getattr(fn, '__name__', fn)}: external kernel on CPU")


def forward_logits(model, ids, positions, **kw):
    out = model(input_ids=ids, position_ids=positions, **kw)
    return out


def run_oracle(model, tokens: list[int], probe: RouterProbe | None):
    """Returns (prefill [T,V], decode [(T-K),V], diagnostics)."""
    import torch

    T = len(tokens)
    K = T // 2
    ids = torch.tensor([tokens], dtype=torch.long)
    pos = torch.arange(T, dtype=torch.long).unsqueeze(0)
    diag: dict = {}
    with torch.no_grad():
        if probe is not None:
            probe.clear()
            probe.enabled = True
        out = forward_logits(model, ids, pos, use_cache=False)
        if probe is not None:
            probe.enabled = False
        prefill = out.logits[0].detach().float().clone()

        # Prefill the first K tokens, then decode one at a time with the returned cache.
        out = forward_logits(model, ids[:, :K], pos[:, :K], use_cache=True)
        pkv = out.past_key_values
        require(pkv is not None, "model returned no past_key_values with use_cache=True")
        diag["cache_class"] = type(pkv).__name__
        head = out.logits[0].detach().float()
        diag["prefix_prefill_vs_full_max_abs_diff"] = float((head - prefill[:K]).abs().max())
        rows = []
        for t in range(K, T):
            out = forward_logits(model, ids[:, t : t + 1], pos[:, t : t + 1], past_key_values=pkv, use_cache=True)
            require(out.logits.shape[1] == 1, f"decode step returned {out.logits.shape[1]} positions")
            rows.append(out.logits[0, -1].detach().float().clone())
            if out.past_key_values is not None:
                pkv = out.past_key_values
        decode = torch.stack(rows, dim=0)

        # Cross-check: the same decode loop letting the model derive positions itself.
        try:
            out = model(input_ids=ids[:, :K], use_cache=True)
            pkv2 = out.past_key_values
            rows2 = []
            for t in range(K, T):
                out = model(input_ids=ids[:, t : t + 1], past_key_values=pkv2, use_cache=True)
                rows2.append(out.logits[0, -1].detach().float())
                if out.past_key_values is not None:
                    pkv2 = out.past_key_values
            diag["auto_positions_decode_max_abs_diff"] = float((torch.stack(rows2) - decode).abs().max())
        except Exception as e:
            diag["auto_positions_decode_max_abs_diff"] = None
            warn(f"decode without explicit position_ids failed: {e!r}")
    diag["decode_from"] = K
    return prefill, decode, diag


def check_logits(prefill) -> tuple[bool, str]:
    import torch

    std = float(prefill.std())
    if not bool(torch.isfinite(prefill).all()):
        return False, "non-finite logits"
    if std <= 0.1:
        return False, f"logit std {std:.4f} <= 0.1"
    row_diff = (prefill[1:] - prefill[:-1]).abs().amax(dim=-1)
    if float(row_diff.min()) <= 1e-3:
        return False, f"two consecutive positions have (nearly) identical logits (min row diff {float(row_diff.min()):.2e})"
    spread = float(prefill.std(dim=0).mean())
    if spread <= 0.05:
        return False, f"logits hardly vary across positions (mean per-vocab std {spread:.4f})"
    return True, f"logit std {std:.3f}, per-vocab std across positions {spread:.3f}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


PER_EXPERT_RE = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<e>\d+)\.(?P<which>gate_proj|up_proj|down_proj)\.weight$")


def verify_saved_tensors(model, model_dir: Path) -> dict:
    """Read every saved tensor back with safetensors and compare it with the
    in-memory parameter it came from.  Writes tensor_names.txt."""
    import torch
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        warn(f"checkpoint is sharded: {files}")
    else:
        files = ["model.safetensors"]
    require(all((model_dir / f).exists() for f in files), f"safetensors file(s) missing in {model_dir}: {files}")

    saved: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(model_dir / f), framework="pt") as fh:
            for k in fh.keys():
                require(k not in saved, f"tensor {k} appears twice")
                saved[k] = fh.get_tensor(k)
    sd = {k: v.detach() for k, v in model.state_dict().items()}

    covered: dict[str, set] = {k: set() for k in sd}
    notes: list[str] = []
    layout = "unknown"
    per_expert = any(PER_EXPERT_RE.match(k) for k in saved)
    fused = any(k.endswith(".experts.gate_up_proj") for k in saved)
    if per_expert and not fused:
        layout = "per_expert"
    elif fused and not per_expert:
        layout = "fused"
    elif per_expert and fused:
        layout = "mixed"
    for name, t in sorted(saved.items()):
        require(t.dtype == torch.float32, f"saved tensor {name} is {t.dtype}, expected float32")
        key = name
        if key not in sd and key.startswith("model.language_model."):
            key = "model." + key[len("model.language_model.") :]
            notes.append("saved names use the model.language_model. prefix")
        if key in sd:
            ref = sd[key]
            require(tuple(ref.shape) == tuple(t.shape), f"{name}: saved shape {tuple(t.shape)} != model {tuple(ref.shape)}")
            require(torch.equal(ref.float(), t), f"{name}: saved values differ from the model's")
            covered[key].add("all")
            continue
        m = PER_EXPERT_RE.match(key)
        if m:
            prefix, e, which = m.group("prefix"), int(m.group("e")), m.group("which")
            if which in ("gate_proj", "up_proj"):
                fused_name = prefix + ".gate_up_proj"
                require(fused_name in sd, f"{name}: no {fused_name} in the model")
                gu = sd[fused_name]
                if tuple(gu.shape) == (N_EXPERTS, 2 * MOE_INTER, HIDDEN):
                    part = gu[e, :MOE_INTER, :] if which == "gate_proj" else gu[e, MOE_INTER:, :]
                else:
                    part = (gu[e, :, :MOE_INTER] if which == "gate_proj" else gu[e, :, MOE_INTER:]).t()
                covered[fused_name].add((e, which))
            else:
                fused_name = prefix + ".down_proj"
                require(fused_name in sd, f"{name}: no {fused_name} in the model")
                dn = sd[fused_name]
                part = dn[e] if tuple(dn.shape) == (N_EXPERTS, HIDDEN, MOE_INTER) else dn[e].t()
                covered[fused_name].add((e, which))
            require(tuple(part.shape) == tuple(t.shape), f"{name}: saved shape {tuple(t.shape)} != expected {tuple(part.shape)}")
            require(torch.equal(part.float().contiguous(), t), f"{name}: saved values differ from the model's fused tensor")
            continue
        raise FixtureError(f"saved tensor {name} {tuple(t.shape)} maps to no model parameter")
    for k, c in covered.items():
        if "all" in c:
            continue
        if k.endswith("experts.gate_up_proj"):
            need = {(e, w) for e in range(N_EXPERTS) for w in ("gate_proj", "up_proj")}
        elif k.endswith("experts.down_proj"):
            need = {(e, "down_proj") for e in range(N_EXPERTS)}
        else:
            need = {"all"}
        require(need <= c, f"model parameter {k} is not (fully) present in the saved checkpoint")

    lines = []
    for name in sorted(saved):
        t = saved[name]
        lines.append(f"{name}\tF32\t{list(t.shape)}")
    (model_dir / "tensor_names.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    total_bytes = sum((model_dir / f).stat().st_size for f in files)
    return {
        "files": files,
        "n_tensors": len(saved),
        "safetensors_bytes": total_bytes,
        "expert_layout_on_disk": layout,
        "notes": sorted(set(notes)),
        "names": sorted(saved),
    }


def reload_check(model_cls, model_dir: Path, tokens: list[int], prefill) -> dict:
    import torch

    try:
        try:
            m2 = model_cls.from_pretrained(str(model_dir), dtype=torch.float32)
        except TypeError:
            m2 = model_cls.from_pretrained(str(model_dir), torch_dtype=torch.float32)
        set_eager(m2)
        m2.eval()
        ids = torch.tensor([tokens], dtype=torch.long)
        pos = torch.arange(len(tokens), dtype=torch.long).unsqueeze(0)
        with torch.no_grad():
            lg = m2(input_ids=ids, position_ids=pos, use_cache=False).logits[0].float()
        diff = float((lg - prefill).abs().max())
        return {"ok": True, "max_abs_diff": diff, "class": type(m2).__name__}
    except Exception as e:
        traceback.print_exc()
        return {"ok": False, "error": repr(e)}


def build_model_fixture(model_type: str, idx: int, toks: dict, out_dir: Path, args) -> dict:
    import numpy as np
    import torch
    import transformers

    spec = MODEL_SPECS[model_type]
    tinfo = toks[spec["tokenizer"]]
    tokenizer = tinfo["tokenizer"]
    vocab_size = tinfo["vocab_size"]
    cfg_cls = get_transformers_class(spec["config_class"], spec["module"])
    model_cls = get_transformers_class(spec["model_class"], spec["module"])
    log(f"== {model_type}: {cfg_cls.__name__} + {model_cls.__name__}, vocab {vocab_size} ({spec['tokenizer']} tokenizer)")

    enc = tokenizer.encode(ORACLE_PROMPT)
    tokens = list(enc.ids)[:PROMPT_MAX_TOKENS]
    require(len(tokens) >= PROMPT_MIN_TOKENS, f"oracle prompt gives only {len(tokens)} tokens")
    T = len(tokens)

    kwargs = config_kwargs(model_type, vocab_size, tinfo["special_ids"])
    chosen = None
    attempts = []
    for attempt in range(args.max_attempts):
        seed = args.seed * 1000 + idx * 100 + attempt
        torch.manual_seed(seed)
        cfg = construct_config(cfg_cls, kwargs)
        require(getattr(cfg, "model_type", None) == spec["hf_model_type"], f"config model_type {getattr(cfg, 'model_type', None)!r} != {spec['hf_model_type']!r}")
        model = model_cls(cfg)
        model = model.to(torch.float32)
        model.eval()
        impl = set_eager(model)
        force_torch_gdn(model)
        for n, p in model.named_parameters():
            require(p.dtype == torch.float32, f"{n} is {p.dtype}")
        structure = check_structure(model_type, model, cfg)
        gen = torch.Generator().manual_seed(seed)
        init_counts = init_weights(model_type, model, gen, tuple(args.a_log_range), args.router_scale)
        _, layers = find_layers(model)
        probe = RouterProbe(layers)
        prefill, decode, diag = run_oracle(model, tokens, probe)
        probe.remove()
        routing = probe.summary(TOP_K)
        require(not probe.mismatch, "; ".join(probe.mismatch))
        ok_logits, why = check_logits(prefill)
        n_distinct0 = len(routing["distinct_experts"].get(0, []))
        margin = routing["min_topk_margin"]
        reasons = []
        if not ok_logits:
            reasons.append(why)
        if n_distinct0 < 4:
            reasons.append(f"layer 0 selects only {n_distinct0} distinct experts")
        if margin < args.min_router_margin:
            reasons.append(f"router top-{TOP_K} margin {margin:.2e} < {args.min_router_margin:.0e}")
        attempts.append({"seed": seed, "rejected_because": reasons})
        log(
            f"  attempt {attempt} seed {seed}: {why}; layer-0 experts {routing['distinct_experts'].get(0)}; "
            f"min router margin {margin:.3e}" + (f" -> rejected: {reasons}" if reasons else " -> accepted")
        )
        if not reasons:
            chosen = (seed, cfg, model, prefill, decode, diag, routing, structure, init_counts, impl)
            break
    if chosen is None:
        raise FixtureError(f"{model_type}: no acceptable random init in {args.max_attempts} attempts: {attempts}")
    seed, cfg, model, prefill, decode, diag, routing, structure, init_counts, impl = chosen
    K = diag["decode_from"]

    V = vocab_size
    require(tuple(prefill.shape) == (T, V), f"prefill logits shape {tuple(prefill.shape)} != {(T, V)}")
    require(tuple(decode.shape) == (T - K, V), f"decode logits shape {tuple(decode.shape)} != {(T - K, V)}")
    max_abs = float(prefill.abs().max())
    dec_diff = float((decode - prefill[K:]).abs().max())
    rel = dec_diff / max_abs
    log(
        f"  prefill [{T}x{V}], max|logit| {max_abs:.4f}; decode from {K}: max|decode - prefill| = {dec_diff:.3e} "
        f"({rel:.2e} of max|logit|); prefix-prefill diff {diag['prefix_prefill_vs_full_max_abs_diff']:.3e}; "
        f"auto-position decode diff {diag['auto_positions_decode_max_abs_diff']}; cache {diag['cache_class']}"
    )
    decode_ok = rel <= 1e-4
    if not decode_ok:
        msg = (
            f"{model_type}: decode logits differ from prefill rows by {dec_diff:.3e} = {rel:.2e} x max|logit| "
            f"(> 1e-4); both files are saved"
        )
        if model_type == "qwen3_moe":
            soft_fail(msg)
        else:
            warn("HYBRID CACHE PATH DIFFERS: " + msg)
    auto = diag["auto_positions_decode_max_abs_diff"]
    if auto is not None and auto > 1e-4 * max_abs:
        warn(f"{model_type}: decode with model-derived positions differs from explicit positions by {auto:.3e}")

    # --- save ---
    model_dir = out_dir / "hf" / model_type
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True)
    try:
        model.save_pretrained(str(model_dir), safe_serialization=True)
    except TypeError as e:
        warn(f"save_pretrained(safe_serialization=True) refused ({e!r}); saving with defaults")
        model.save_pretrained(str(model_dir))
    require((model_dir / "config.json").exists(), "config.json was not written")
    saved_cfg = json.loads((model_dir / "config.json").read_text())
    log(f"  config.json: {json.dumps(saved_cfg, sort_keys=True)}")
    tensors = verify_saved_tensors(model, model_dir)
    log(
        f"  saved {tensors['n_tensors']} tensors in {tensors['files']} ({tensors['safetensors_bytes']} bytes), "
        f"experts on disk: {tensors['expert_layout_on_disk']}"
    )
    for n in tensors["names"]:
        print(f"    {n}", flush=True)
    if tensors["safetensors_bytes"] >= 2 * 1024 * 1024:
        soft_fail(f"{model_type}: safetensors is {tensors['safetensors_bytes']} bytes (>= 2 MiB)")

    prefill_np = np.ascontiguousarray(prefill.numpy().astype("<f4"))
    decode_np = np.ascontiguousarray(decode.numpy().astype("<f4"))
    prefill_np.tofile(model_dir / "logits_prefill.f32")
    decode_np.tofile(model_dir / "logits_decode.f32")
    require((model_dir / "logits_prefill.f32").stat().st_size == T * V * 4, "logits_prefill.f32 size")
    require((model_dir / "logits_decode.f32").stat().st_size == (T - K) * V * 4, "logits_decode.f32 size")

    reload = {"ok": None}
    if not args.skip_reload:
        reload = reload_check(model_cls, model_dir, tokens, prefill)
        if not reload["ok"]:
            soft_fail(f"{model_type}: {model_cls.__name__}.from_pretrained on the saved folder failed: {reload['error']}")
        elif reload["max_abs_diff"] > 1e-5 * max_abs:
            soft_fail(f"{model_type}: reloaded model's logits differ by {reload['max_abs_diff']:.3e}")
        else:
            log(f"  reload check: {model_cls.__name__}.from_pretrained reproduces the logits (max diff {reload['max_abs_diff']:.2e})")

    def rot_summary():
        rp = getattr(cfg, "rope_parameters", None)
        return dict(rp) if isinstance(rp, dict) else rp

    expected = {
        "model_type": model_type,
        "hf_model_type": getattr(cfg, "model_type", None),
        "hf_architecture": model_cls.__name__,
        "tokenizer": spec["tokenizer"],
        "tokenizer_file": f"../../tokenizer/{spec['tokenizer']}/tokenizer.json",
        "prompt_text": ORACLE_PROMPT,
        "prompt_truncated_to": PROMPT_MAX_TOKENS,
        "tokens": tokens,
        "n_positions": T,
        "decode_from": K,
        "vocab_size": V,
        "prefill_file": "logits_prefill.f32",
        "prefill_shape": [T, V],
        "decode_file": "logits_decode.f32",
        "decode_shape": [T - K, V],
        "logits_format": "little-endian float32, row-major, one row of vocab_size logits per position",
        "max_abs_logit": max_abs,
        "logit_std": float(prefill.std()),
        "argmax_prefill": [int(v) for v in prefill.argmax(dim=-1).tolist()],
        "argmax_decode": [int(v) for v in decode.argmax(dim=-1).tolist()],
        "max_prefill_vs_decode_diff": dec_diff,
        "max_prefill_vs_decode_rel": rel,
        "decode_matches_prefill_1e-4": decode_ok,
        "prefix_prefill_vs_full_max_abs_diff": diag["prefix_prefill_vs_full_max_abs_diff"],
        "auto_positions_decode_max_abs_diff": diag["auto_positions_decode_max_abs_diff"],
        "cache_class": diag["cache_class"],
        "tolerance_rel_to_max_abs_logit": 1e-4,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "base_seed": args.seed,
        "init_attempts": attempts,
        "attn_implementation": impl,
        "layer_types": structure["layer_types"],
        "rot_dim": structure["rot_dim"],
        "rope_parameters": rot_summary(),
        "expert_storage_in_memory": structure["expert_storage_in_memory"],
        "expert_layout_on_disk": tensors["expert_layout_on_disk"],
        "safetensors_files": tensors["files"],
        "safetensors_bytes": tensors["safetensors_bytes"],
        "n_tensors": tensors["n_tensors"],
        "saved_name_notes": tensors["notes"],
        "router_min_topk_margin": routing["min_topk_margin"],
        "router_distinct_experts_per_layer": {str(k): v for k, v in routing["distinct_experts"].items()},
        "init": {
            "counts": init_counts,
            "linear": "N(0, 1/fan_in)",
            "embedding": "N(0, 1)",
            "router": f"N(0, ({args.router_scale}/sqrt(hidden))^2)",
            "experts_fused": "gate_up N(0, 1/hidden), down N(0, 1/moe_intermediate)",
            "norm_plain_and_gated": "1 + 0.2*N(0,1)",
            "norm_zero_centred": "0.2*N(0,1) (effective gain 1 + w)",
            "A_log": f"log(U({args.a_log_range[0]}, {args.a_log_range[1]}))",
            "dt_bias": "U(0.5, 1.5)",
            "conv1d": "N(0, 1/kernel)",
        },
        "reload_check": reload,
        "config_json": saved_cfg,
    }
    (model_dir / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log(f"  wrote {model_dir}")
    return expected


def write_manifest(out_dir: Path, model_types: list[str], toks: dict, args) -> None:
    import torch
    import transformers

    files = []
    roots = [out_dir / "tokenizer"] + [out_dir / "hf" / m for m in model_types]
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                files.append({"path": str(p.relative_to(out_dir)), "bytes": p.stat().st_size, "sha256": file_sha256(p)})
    total = sum(f["bytes"] for f in files)
    manifest = {
        "generator": "tools/reference/make_fixtures.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "seed": args.seed,
        "models": model_types,
        "tokenizers": {k: {"vocab_size": v["vocab_size"], "special_ids": v["special_ids"]} for k, v in toks.items()},
        "total_bytes": total,
        "files": files,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {out_dir / 'manifest.json'}: {len(files)} files, {total} bytes in all")
    if total >= 10 * 1024 * 1024:
        soft_fail(f"fixtures total {total} bytes (>= 10 MiB)")


def setup_torch() -> None:
    import torch

    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception as e:
        warn(f"set_float32_matmul_precision failed: {e!r}")
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except Exception as e:
        warn(f"use_deterministic_algorithms unavailable: {e!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures", help="output folder (default: tests/fixtures)")
    ap.add_argument("--seed", type=int, default=1234, help="base random seed (default 1234)")
    ap.add_argument(
        "--models",
        default=",".join(MODEL_SPECS),
        help=f"comma-separated subset of {', '.join(MODEL_SPECS)} (default: all)",
    )
    ap.add_argument("--max-attempts", type=int, default=64, help="random inits tried per model, 1..100 (default 64)")
    ap.add_argument(
        "--min-router-margin",
        type=float,
        default=1e-2,
        help="smallest accepted gap between the k-th and (k+1)-th router logit, over all layers and positions "
        "(default 1e-2, so that small numeric differences cannot flip an expert choice)",
    )
    ap.add_argument("--router-scale", type=float, default=2.0, help="router weight std = scale/sqrt(hidden)")
    ap.add_argument("--a-log-range", type=float, nargs=2, default=[1.0, 16.0], metavar=("LO", "HI"), help="A_log = log(U(LO, HI))")
    ap.add_argument("--skip-reload", action="store_true", help="skip the from_pretrained round-trip check")
    args = ap.parse_args(argv)

    if not 1 <= args.max_attempts <= 100:
        ap.error("--max-attempts must be in 1..100 (seeds of different models must not overlap)")
    model_types = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in model_types:
        if m not in MODEL_SPECS:
            ap.error(f"unknown model {m}; choose from {', '.join(MODEL_SPECS)}")

    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"python {sys.version.split()[0]}, output {out_dir}, seed {args.seed}, models {model_types}")

    try:
        import numpy
        import safetensors
        import torch
        import transformers
    except Exception as e:
        log(f"ERROR: missing dependency: {e!r}")
        return 2
    log(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"safetensors {safetensors.__version__}, numpy {numpy.__version__}"
    )
    if not transformers.__version__.split(".")[0].isdigit() or int(transformers.__version__.split(".")[0]) < 5:
        warn(f"transformers {transformers.__version__} is not v5; the script was written against v5")
    setup_torch()

    try:
        toks = build_tokenizers(out_dir)
        results = {}
        for idx, m in enumerate(model_types):
            results[m] = build_model_fixture(m, idx, toks, out_dir, args)
        write_manifest(out_dir, model_types, toks, args)
    except FixtureError as e:
        log(f"ERROR: {e}")
        traceback.print_exc()
        return 2

    log("summary:")
    for m, r in results.items():
        log(
            f"  {m:12s} T={r['n_positions']} K={r['decode_from']} V={r['vocab_size']} "
            f"max|logit|={r['max_abs_logit']:.3f} decode-vs-prefill={r['max_prefill_vs_decode_diff']:.2e} "
            f"experts-on-disk={r['expert_layout_on_disk']} seed={r['seed']} "
            f"reload={'skipped' if r['reload_check'].get('ok') is None else r['reload_check'].get('ok')}"
        )
    for w in WARNINGS:
        log(f"  warning: {w}")
    if FAILURES:
        for f in FAILURES:
            log(f"  FAILED: {f}")
        log(f"{len(FAILURES)} check(s) failed; files were written but need attention")
        return 1
    log(f"all checks passed in {time.time() - T0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
