"""Small deterministic data makers shared by the case modules (not a case module: the harness skips files whose
name starts with "_"). Load it with `_synth = load_synth()` as the modules here do."""
from __future__ import annotations

import random

NAMES = ["ROMEO", "JULIET", "NURSE", "FRIAR", "CAPULET", "MERCUTIO", "TYBALT", "BENVOLIO"]
DET = ["the", "a", "my", "thy", "our", "this", "that", "his", "her"]
ADJ = ["sweet", "fair", "noble", "gentle", "cruel", "old", "young", "bright", "dark", "true", "poor", "good"]
NOUN = ["lord", "lady", "night", "day", "heart", "love", "sword", "house", "name", "friend", "moon", "grave",
        "hand", "eye", "death", "life", "king", "queen", "tongue", "word"]
VERB = ["loves", "hates", "sees", "keeps", "takes", "calls", "fears", "knows", "gives", "holds", "seeks", "leaves"]
ADV = ["now", "too", "still", "soon", "well", "not"]


def english_like(n_chars: int, seed: int = 1234, oaths: bool = False) -> str:
    """Play-like text from a tiny grammar: speaker lines, sentences of determiner-adjective-noun-verb phrases,
    punctuation and line breaks. Deterministic for a seed; char-level models learn it (words, agreement,
    layout) well below the unigram entropy. `oaths`: about one sentence in 8 opens with "O God, " (for a script
    whose sampling prompt needs those characters); the text without it is unchanged."""
    rng = random.Random(seed)

    def np_():
        w = [rng.choice(DET)]
        if rng.random() < 0.5:
            w.append(rng.choice(ADJ))
        w.append(rng.choice(NOUN))
        return w

    def sentence():
        w = np_() + ([rng.choice(ADV)] if rng.random() < 0.3 else []) + [rng.choice(VERB)] + np_()
        if rng.random() < 0.3:
            w += ["and"] + np_()
        s = " ".join(w)
        if oaths and rng.random() < 0.125:
            s = "O God, " + s
        return s[0].upper() + s[1:] + rng.choice([".", ".", ",", "!", "?", ";"])

    out, size = [], 0
    while size < n_chars:
        block = rng.choice(NAMES) + ":\n" + "\n".join(
            " ".join(sentence() for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(1, 4))) + "\n\n"
        out.append(block)
        size += len(block)
    return "".join(out)[:n_chars]
