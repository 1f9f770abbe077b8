#!/usr/bin/python3
"""Writes train_2k.csv: the 400 rows of train.csv, then 1,600 further abstracts drawn with
random.Random(1) from the shared PubMed files (pe_sgd_text/pubmed/dev.csv then test.csv, in
file order, each text once), none of them in train.csv or eval.csv.
Usage (from the repository root): experiments/data/pubmed_sample/make_train_2k.py"""
import csv
import random

csv.field_size_limit(1 << 30)
HERE = "experiments/data/pubmed_sample/"
SHARED = "../shared/data/pe_sgd_text/pubmed/"


def texts(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [row["text"] for row in csv.DictReader(f)]


train, held = texts(HERE + "train.csv"), texts(HERE + "eval.csv")
used, pool = set(train) | set(held), []
for t in texts(SHARED + "dev.csv") + texts(SHARED + "test.csv"):
    if t.strip() and t not in used:
        used.add(t)
        pool.append(t)
rows = train + random.Random(1).sample(pool, 1600)
with open(HERE + "train_2k.csv", "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["text"])
    w.writerows([t] for t in rows)
print(f"wrote {HERE}train_2k.csv: {len(rows)} rows ({len(pool)} candidates)")
