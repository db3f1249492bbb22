#!/usr/bin/python3
"""Plots a canvas training log (train.csv) to a PNG: training loss per step and validation loss."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(csv_path, png_path):
    steps, loss, val_steps, val = [], [], [], []
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            steps.append(int(row["step"]))
            loss.append(float(row["loss"]))
            if row["val_loss"]:
                val_steps.append(int(row["step"]))
                val.append(float(row["val_loss"]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, loss, lw=0.8, alpha=0.6, label="train loss")
    if val:
        ax.plot(val_steps, val, "o-", ms=3, label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per scored token)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(csv_path)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_training.py train.csv out.png")
    main(sys.argv[1], sys.argv[2])
