#!/usr/bin/env python3
"""Write the paper-scale DP-SFT Tables 1-2 baselines (paper 002: Full-tuning, Full-DP, LoRA-DP,
Adapter-DP on SST-2, IMDB, QNLI, MNLI, and RTE beside them) for a GPU into experiments/glue/paper/.
Rerun after changing a setting here; the files are committed and tests/experiments_test.sh
regenerates them, compares and validates each.

The paper's settings (Implementation Details): roberta-base, batch 32, max length 128 (SST-2,
QNLI, RTE) or 256 (IMDB, MNLI), lr 5e-4 and clip 10 for every DP method, delta 1e-5 (MNLI 1e-6),
epsilon 4 and 1; LoRA r 16 (alpha 32, dropout 0.05 on query, key, value, dense, as its code),
adapters of reduction factor 48. What it does not state, and what we use:
  - the DP baselines' length: one epoch (train.steps = ceil(N / 32)), as DP-SFT's stage 2 in
    experiments/dp_sft/paper/;
  - Full-tuning's lr and length: RoBERTa's GLUE recipe (Liu et al. 2019: lr 1e-5..3e-5, batch
    16 or 32, up to 10 epochs): lr 2e-5, 3 epochs, warmup 6 %.
Choose lr on a validation split (experiments/glue/run.sh --select does it at small scale) rather
than trusting either. dpft samples Poisson batches at q = 32 / N and accounts for exactly that
(the paper's code draws fixed-size batches but accounts for Poisson sampling).

Usage: experiments/glue/paper_specs.py [--out DIR]   (default experiments/glue/paper)
"""
import argparse
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--out", default=os.path.join(HERE, "paper"))
OUT = ap.parse_args().out
D = "../shared/data"
PAIR = "text_pair_column"
# name, training rows, labels, max length, delta, train / eval blocks (where to fill in paths).
TASKS = {
    "sst2": dict(name="SST-2", n=67349, labels="['0', '1']", max_length=128,
                 train=f"{{path: {D}/glue_sst2/train.tsv, text_column: sentence, label_column: label}}",
                 eval=f"{{path: {D}/glue_sst2/dev.tsv, text_column: sentence, label_column: label}}",
                 where="the data are ../shared/data/glue_sst2, the GLUE dev set as test"),
    "imdb": dict(name="IMDB", n=25000, labels="[negative, positive]", max_length=256,
                 train="{path: /path/to/imdb/train.csv, text_column: text, label_column: label}",
                 eval="{path: /path/to/imdb/test.csv, text_column: text, label_column: label}",
                 where="fill in the IMDB train / test files (columns text, label; labels "
                       "negative / positive, or add label_map)"),
    "qnli": dict(name="QNLI", n=104743, labels="[entailment, not_entailment]", max_length=128,
                 train=f"{{path: /path/to/glue/QNLI/train.tsv, text_column: question, {PAIR}: sentence, label_column: label}}",
                 eval=f"{{path: /path/to/glue/QNLI/dev.tsv, text_column: question, {PAIR}: sentence, label_column: label}}",
                 where="fill in the GLUE QNLI files, the dev set as test"),
    "mnli": dict(name="MNLI", n=392702, labels="[entailment, neutral, contradiction]",
                 max_length=256, delta="1.0e-6",
                 train=f"{{path: /path/to/glue/MNLI/train.tsv, text_column: sentence1, {PAIR}: sentence2, label_column: gold_label}}",
                 eval=f"{{path: /path/to/glue/MNLI/dev_matched.tsv, text_column: sentence1, {PAIR}: sentence2, label_column: gold_label}}",
                 eval_sets=f"[{{name: mismatched, path: /path/to/glue/MNLI/dev_mismatched.tsv, text_column: sentence1, {PAIR}: sentence2, label_column: gold_label}}]",
                 where="fill in the GLUE MNLI files; eval is dev matched, eval_sets adds mismatched"),
    "rte": dict(name="RTE", n=2490, labels="[entailment, not_entailment]", max_length=128,
                train=f"{{path: {D}/glue_rte/train.tsv, text_column: sentence1, {PAIR}: sentence2, label_column: label}}",
                eval=f"{{path: {D}/glue_rte/dev.tsv, text_column: sentence1, {PAIR}: sentence2, label_column: label}}",
                where="the data are ../shared/data/glue_rte, the GLUE dev set as test (not in the paper)"),
}
METHODS = {
    "full": dict(label="Full-tuning", peft="{kind: full, targets: [all]}", what="non-private full fine-tuning"),
    "full_dp": dict(label="Full-DP", peft="{kind: full, targets: [all]}",
                    what="DP-SGD on every parameter (ghost norms where cheaper)"),
    "lora_dp": dict(label="LoRA-DP",
                    peft="{kind: lora, r: 16, alpha: 32, dropout: 0.05, targets: [query, key, value, dense]}",
                    what="DP-SGD on LoRA r 16 (the classifier trains in full)"),
    "adapter_dp": dict(label="Adapter-DP", peft="{kind: adapter, reduction_factor: 48}",
                       what="DP-SGD on Houlsby adapters of reduction factor 48 (and the classifier)"),
}
FULL_EPOCHS, FULL_LR = 3, "2.0e-5"


def spec(task, method):
    t, m = TASKS[task], METHODS[method]
    private = method != "full"
    epochs = 1 if private else FULL_EPOCHS
    steps = math.ceil(epochs * t["n"] / 32)
    lines = [
        f"# DP-SFT Tables 1-2 baseline (paper 002), paper scale, for a GPU: {t['name']} ({t['n']:,} "
        f"training rows), {m['label']}: {m['what']}.",
        "# Written by experiments/glue/paper_specs.py (its docstring has the paper's settings and what",
        f"# we chose where it is silent). roberta-base, batch 32, max length {t['max_length']}, "
        + ("lr 5e-4, clip 10, one epoch" if private else f"lr {FULL_LR}, {FULL_EPOCHS} epochs")
        + f" (train.steps = ceil({'' if epochs == 1 else f'{epochs} '}N / 32) = {steps}).",
        "# Fill in model.path: a local HF roberta-base given this task's classifier by `dpft model rehead",
        f"# --from ROBERTA --head classification --labels {t['labels'].strip('[]').replace(' ', '').replace(chr(39), '')} --out DIR --seed 0`;",
        f"# {t['where']}.",
        "# `device: cuda` needs dpft built with scripts/build_cuda.sh."
        + (" Sweep epsilon 4 and 1: scripts/sweep.sh --eps \"4 1\"." if private else ""),
        f"name: glue-paper-{task}-{method.replace('_', '-')}",
        f"label: {m['label']}",
        "seed: 0",
        "device: cuda",
        "model:",
        "  path: /path/to/roberta-base",
        f"  peft: {m['peft']}",
        "data:",
        "  task: classification",
        f"  labels: {t['labels']}",
        f"  train: {t['train']}",
        f"  eval: {t['eval']}",
    ]
    if "eval_sets" in t:
        lines.append(f"  eval_sets: {t['eval_sets']}")
    lines += [f"  max_length: {t['max_length']}", "privacy:"]
    if private:
        lines += ["  epsilon: 4", f"  delta: {t.get('delta', '1.0e-5')}", "  clip_norm: 10.0"]
    else:
        lines += ["  epsilon: .inf"]
    lines += [
        "train:",
        f"  steps: {steps}",
        "  batch_size: 32",
        "  micro_batch_size: 32",
        "  optimizer: adamw",
        f"  lr: {'5.0e-4' if private else FULL_LR}",
        "  warmup_ratio: 0.06",
        "method:",
        f"  name: {'dp-sgd' if private else 'sgd'}",
        "output:",
        "  save_model: false",
        "",
    ]
    path = os.path.join(OUT, f"{task}-{method}.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(path)


os.makedirs(OUT, exist_ok=True)
for task in TASKS:
    for method in METHODS:
        spec(task, method)
