"""Write tests/embedding/data/minilm_reference.npz: texts and their all-MiniLM-L6-v2 vectors from sentence-transformers.

Run once (it needs torch); the test that reads the file does not, so parity with sentence-transformers is
still checked where torch is absent.

    HF_HUB_OFFLINE=1 python tests/embedding/data/make_minilm_reference.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autogen_shared_memory import SentenceTransformerEmbedder

OUT = Path(__file__).with_name("minilm_reference.npz")

TEXTS = [
    "The staging database is rebuilt from production snapshots every Sunday night.",
    "Invoices must be approved by the finance lead before payment.",
    "How should I reach out to the client?",
    "Error code E1042 means the payment gateway rejected the card.",
    "hello",
    "",
    "   \t\n ",
    "?!...;;",
    "Ünïcödé façade — naïve café, Straße, Ærøskøbing.",
    "Привет, как дела? Всё хорошо.",
    "مرحبا بالعالم، هذه جملة للاختبار",
    "東京は日本の首都です。人口は約1400万人。",
    "机器学习模型把句子变成向量。",
    "한국어 문장도 토큰으로 나뉩니다.",
    "Deploy finished 🚀🎉 — all green ✅",
    "👍",
    "zero\u200bwidth\u200bjoiner and\u00a0no-break space",
    "control\x00chars\x07inside\x1b[0m text",
    "MiXeD CaSe WoRdS ShOuLd LoWeR",
    "https://example.com/path?q=1&r=two#frag",
    "def f(x):\n    return x ** 2  # squared",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "3.14159 2.71828 1.41421 1,000,000 -42 +7 1e-9",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "The quick brown fox jumps over the lazy dog. " * 40,
    "supercalifragilisticexpialidocious antidisestablishmentarianism " * 60,
    " ".join(f"token{i}" for i in range(400)),
    "漢字" * 300,
    "🙂" * 300,
    "Pull requests need two approvals before merging to main.",
    "Our mobile app supports iOS 16 and newer only.",
    "The CEO wants weekly summaries as bullet points, no longer than one page.",
    "Reviewers reject code changes that lack tests.",
    "E1042 card declined",
    "Which operating system versions is our application compatible with?",
    "naïve",
    "naive",
    "  leading and trailing spaces  ",
    "line one\nline two\r\nline three",
    "Ωμέγα και άλφα: ελληνικό κείμενο.",
]


def main() -> None:
    vectors = SentenceTransformerEmbedder().embed(TEXTS)
    np.savez_compressed(OUT, texts=np.array(TEXTS, dtype=np.str_), vectors=vectors.astype(np.float32))
    print(f"wrote {OUT} ({len(TEXTS)} texts, {OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
