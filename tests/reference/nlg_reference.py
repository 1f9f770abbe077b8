#!/usr/bin/env python3
"""Independent reference for dpft's NLG metrics (tests/test_nlg.cpp).

Reads a JSON file {"hyps": [str], "refs": [[str]]} (raw text) and prints JSON:
  tokens      mteval-v13a tokenization of every hypothesis and reference, done with Python's
              `re` and the Perl script's own regular expressions (lower-cased)
  bleu        NLTK corpus_bleu (4-grams, uniform weights, no smoothing): the multi-reference
              definition of mteval-v13a (clipping by the max reference count, closest length)
  nist_single NLTK corpus_nist (5-grams) with only each segment's first reference (NLTK's
              multi-reference NIST differs from mteval's; with one reference they agree)
  nist        mteval's multi-reference NIST written out plainly here
  meteor      NLTK meteor_score per segment (exact + Snowball English stems, no synonyms)
  rouge_l     the MS-COCO caption scripts' ROUGE-L written out plainly here (beta 1.2)
  cider       the MS-COCO caption scripts' CIDEr-D written out plainly here
Needs python3-nltk (Debian).
"""
import json
import math
import re
import sys
from collections import Counter

from nltk.stem.snowball import SnowballStemmer
from nltk.translate.bleu_score import corpus_bleu
from nltk.translate.meteor_score import meteor_score
from nltk.translate.nist_score import corpus_nist


def v13a(text):
    s = text
    s = s.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    s = s.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    s = " " + s + " "
    s = re.sub(r"[A-Z]", lambda m: m.group(0).lower(), s)
    s = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", s)
    s = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", s)
    s = re.sub(r"([\.,])([^0-9])", r" \1 \2", s)
    s = re.sub(r"([0-9])(-)", r"\1 \2 ", s)
    s = re.sub(r"[ \t\n\r\f\v]+", " ", s).strip()
    return s.split(" ") if s else []


def ngrams(toks, n):
    return Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))


def nist_mteval(hyps, refs, max_n=5):
    ref_counts, ref_words = Counter(), 0
    for group in refs:
        for r in group:
            ref_words += len(r)
            for n in range(1, max_n + 1):
                ref_counts.update(ngrams(r, n))

    def info(g):
        num = ref_words if len(g) == 1 else ref_counts[g[:-1]]
        return math.log2(num / ref_counts[g])

    info_sum, total = [0.0] * max_n, [0] * max_n
    sys_len, ref_len = 0, 0.0
    for h, group in zip(hyps, refs):
        sys_len += len(h)
        ref_len += sum(len(r) for r in group) / len(group)
        for n in range(1, max_n + 1):
            hc = ngrams(h, n)
            total[n - 1] += sum(hc.values())
            ref_max = Counter()
            for r in group:
                for g, c in ngrams(r, n).items():
                    ref_max[g] = max(ref_max[g], c)
            for g, c in hc.items():
                info_sum[n - 1] += min(c, ref_max[g]) * (info(g) if ref_max[g] else 0.0)
    score = sum(i / t for i, t in zip(info_sum, total) if t > 0)
    ratio = sys_len / ref_len
    if ratio < 1:
        beta = math.log(0.5) / math.log(1.5) ** 2
        score *= math.exp(beta * math.log(ratio) ** 2)
    return score


def lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = (table[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1]
                           else max(table[i - 1][j], table[i][j - 1]))
    return table[len(a)][len(b)]


def rouge_l(hyps, refs, beta=1.2):
    scores = []
    for h, group in zip(hyps, refs):
        p = max(lcs(h, r) / len(h) for r in group)
        r_ = max(lcs(h, r) / len(r) for r in group)
        scores.append(0.0 if p == 0 or r_ == 0 else (1 + beta ** 2) * p * r_ / (r_ + beta ** 2 * p))
    return sum(scores) / len(scores)


def cider(hyps, refs, max_n=4, sigma=6.0):
    def counts(t):
        c = Counter()
        for n in range(1, max_n + 1):
            c.update(ngrams(t, n))
        return c

    df = Counter()
    for group in refs:
        df.update(set(g for r in group for g in counts(r)))
    log_docs = math.log(len(refs))

    def vec(c):
        v = [dict() for _ in range(max_n)]
        norm = [0.0] * max_n
        length = 0
        for g, tf in c.items():
            n = len(g) - 1
            v[n][g] = tf * (log_docs - math.log(max(1.0, df[g])))
            norm[n] += v[n][g] ** 2
            if n == 1:
                length += tf
        return v, [math.sqrt(x) for x in norm], length

    total = 0.0
    for h, group in zip(hyps, refs):
        vh, nh, lh = vec(counts(h))
        score = [0.0] * max_n
        for r in group:
            vr, nr, lr = vec(counts(r))
            for n in range(max_n):
                val = sum(min(w, vr[n].get(g, 0.0)) * vr[n].get(g, 0.0) for g, w in vh[n].items())
                if nh[n] != 0 and nr[n] != 0:
                    val /= nh[n] * nr[n]
                score[n] += val * math.exp(-((lh - lr) ** 2) / (2 * sigma ** 2))
        total += sum(score) / max_n / len(group) * 10.0
    return total / len(hyps)


class NoSynonyms:
    def synsets(self, word):
        return []


def main():
    data = json.load(open(sys.argv[1]))
    hyps = [v13a(h) for h in data["hyps"]]
    refs = [[v13a(r) for r in group] for group in data["refs"]]
    stem = SnowballStemmer("english")
    out = {
        "tokens": {"hyps": hyps, "refs": refs},
        "bleu": corpus_bleu(refs, hyps),
        "nist_single": corpus_nist([[g[0]] for g in refs], hyps, n=5),
        "nist": nist_mteval(hyps, refs),
        "meteor": [meteor_score(g, h, stemmer=stem, wordnet=NoSynonyms()) for h, g in zip(hyps, refs)],
        "rouge_l": rouge_l(hyps, refs),
        "cider": cider(hyps, refs),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
