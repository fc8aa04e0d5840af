"""Decision time: the ONNX encoder run by onnxruntime, hashed character n-grams beside it, the bundle's
softmax head. No torch here.

Early exit: a bundle may split the encoder in two graphs, its first layers and the rest, with a second
head over the first graph's pooled output. A prompt that head is sure of (its confidence at or above the
threshold, the one that also spares the request L2's confirmation) is decided there; the others run the
remaining layers and the full head decides, as without the split (docs/classifier.md, "Early exit").

Determinism: the text is tokenised by the bundled ``tokenizer.json`` and truncated to ``max_length``
tokens, so the same text always gives the same tokens and the same input shape (an encoder exported with
a fixed sequence length, as bundles before the dynamic export were, gets its input padded to it); the
sessions run on one thread, sequentially, and the heads' arithmetic is numpy float64 on the encoder's
float32 output. The n-grams are counted on
the normalised text's first ``max_chars`` characters and hashed with CRC-32. The same text gives the
same domain and the same confidence, bit for bit, and so the same exit.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

DEFAULT_THRESHOLD = 0.85
EMBEDDING_DIM = 384  # all-MiniLM-L6-v2


class ClassifierError(ValueError):
    """The classifier section of a rules bundle, or its encoder files, cannot be used."""


@dataclass(frozen=True)
class Classification:
    domain: str
    confidence: float
    early: bool = False  # decided by the early head, on the encoder's first layers alone


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _pinned(base: Path, name: Any, sha256: Any, what: str) -> Path:
    if not isinstance(name, str) or not isinstance(sha256, str):
        raise ClassifierError(f"classifier: {what} file name and sha256 must be strings")
    path = base / name
    if not path.is_file():
        raise ClassifierError(f"classifier: {what} file {path} not found")
    actual = file_sha256(path)
    if actual != sha256:
        raise ClassifierError(
            f"classifier: {what} file {path} has sha256 {actual}, the bundle pins {sha256}; "
            "retrain the bundle (python -m compute_agents.classifier train) or restore the file"
        )
    return path


class Encoder:
    """all-MiniLM-L6-v2 as ONNX: at most ``max_length`` tokens in, a mean-pooled, L2-normalised float32
    vector out. The input is the text's own tokens, unpadded, when the graph's sequence axis is dynamic:
    padding would cost time in proportion (a 20-token prompt padded to 32 took 1.5× as long).

    With ``rest_path`` the encoder is two graphs: the first layers (token ids in; the hidden states and
    their pooled vector out) and the remaining ones (those hidden states in; the final pooled vector out),
    so a decision can stop after the first (``first``) or go on (``rest``)."""

    def __init__(
        self, onnx_path: Path, tokenizer_path: Path, max_length: int, rest_path: Path | None = None
    ) -> None:
        if max_length < 8 or max_length > 512:
            raise ClassifierError(f"classifier: max_length {max_length} outside 8..512")
        self.max_length = max_length
        self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.session = _session(onnx_path)
        self.rest_session = None if rest_path is None else _session(rest_path)
        outputs = [output.name for output in self.session.get_outputs()]
        if (self.rest_session is not None) != ("hidden" in outputs):
            raise ClassifierError(
                f"classifier: encoder {onnx_path} has outputs {outputs}: a split encoder's first graph "
                "gives 'hidden' and 'embedding', a whole one 'embedding' alone"
            )
        fixed = self.session.get_inputs()[0].shape[1]
        if isinstance(fixed, int):  # exported with a fixed sequence length: pad every input to it
            if fixed != max_length:
                raise ClassifierError(
                    f"classifier: the encoder reads {fixed} tokens, the bundle says {max_length}"
                )
            self.tokenizer.enable_padding(length=fixed, pad_id=0, pad_type_id=0, pad_token="[PAD]")  # noqa: S106
        else:  # the tokenizer file's own setting pads to 128
            self.tokenizer.no_padding()

    @property
    def split(self) -> bool:
        return self.rest_session is not None

    @staticmethod
    def normalise(text: str) -> str:
        """Whitespace runs become one space; the tokenizer lower-cases and cleans the rest."""
        return " ".join(text.split())

    def tokens(self, text: str) -> Tokens:
        encoding = self.tokenizer.encode(self.normalise(text))
        return Tokens(
            np.asarray([encoding.ids], dtype=np.int64), np.asarray([encoding.attention_mask], dtype=np.int64)
        )

    def first(self, tokens: Tokens) -> npt.NDArray[np.float32]:
        """The first graph's pooled vector (the whole encoder's when it is not split); a split encoder
        keeps its hidden states in ``tokens`` for ``rest``."""
        inputs = {"input_ids": tokens.ids, "attention_mask": tokens.mask}
        if self.rest_session is None:
            (vector,) = self.session.run(["embedding"], inputs)
        else:
            tokens.hidden, vector = self.session.run(["hidden", "embedding"], inputs)
        return np.asarray(vector[0], dtype=np.float32)

    def rest(self, tokens: Tokens) -> npt.NDArray[np.float32]:
        """The remaining layers over ``first``'s hidden states: the whole encoder's pooled vector."""
        if self.rest_session is None or tokens.hidden is None:
            raise ClassifierError("classifier: rest() needs a split encoder and first() run on these tokens")
        (vector,) = self.rest_session.run(
            ["embedding"], {"hidden": tokens.hidden, "attention_mask": tokens.mask}
        )
        return np.asarray(vector[0], dtype=np.float32)

    def embed_both(self, text: str) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """(the first graph's vector, the whole encoder's vector): the same one twice when not split."""
        tokens = self.tokens(text)
        first = self.first(tokens)
        return first, self.rest(tokens) if self.split else first

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """The whole encoder's pooled vector."""
        return self.embed_both(text)[1]


@dataclass
class Tokens:
    """A text's encoder input, and the first graph's hidden states once it ran (a split encoder)."""

    ids: npt.NDArray[np.int64]
    mask: npt.NDArray[np.int64]
    hidden: npt.NDArray[np.float32] | None = None


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types
        raise ClassifierError(f"classifier: cannot load encoder {path}: {error}") from None


@dataclass(frozen=True)
class CharNgrams:
    """Hashed character n-gram counts of the lower-cased text, L2-normalised, set beside the embedding:
    what the English encoder cannot see in Chinese (its vocabulary splits CJK text into characters it
    was not trained on)."""

    buckets: int = 4096
    orders: tuple[int, ...] = (1, 2)
    max_chars: int = 256

    @classmethod
    def from_spec(cls, spec: Any) -> CharNgrams:
        try:
            ngrams = cls(int(spec["buckets"]), tuple(int(n) for n in spec["orders"]), int(spec["max_chars"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ClassifierError(f"classifier: bad char_ngrams: {error!r}") from None
        if not 0 < ngrams.buckets <= 65536 or not ngrams.orders or not all(0 < n <= 5 for n in ngrams.orders):
            raise ClassifierError("classifier: char_ngrams needs 1..65536 buckets and orders in 1..5")
        if not 0 < ngrams.max_chars <= 4096:
            raise ClassifierError("classifier: char_ngrams max_chars must be in 1..4096")
        return ngrams

    def spec(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "orders": list(self.orders), "max_chars": self.max_chars}

    def features(self, text: str) -> npt.NDArray[np.float64]:
        normalised = Encoder.normalise(text).lower()[: self.max_chars]
        counts = np.zeros(self.buckets)
        for n in self.orders:
            for start in range(len(normalised) - n + 1):
                gram = normalised[start : start + n]
                if not gram.isspace():
                    counts[zlib.crc32(gram.encode("utf-8")) % self.buckets] += 1
        norm = float(np.linalg.norm(counts))
        return counts / norm if norm else counts


def softmax(logits: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return np.asarray(exp / exp.sum(axis=-1, keepdims=True), dtype=np.float64)


@dataclass(frozen=True)
class Head:
    """A softmax head's weights and bias, already divided by ``temperature`` (the calibration)."""

    weights: npt.NDArray[np.float64]
    bias: npt.NDArray[np.float64]
    temperature: float = 1.0

    @classmethod
    def from_spec(cls, spec: Any, labels: int, width: int, what: str) -> Head:
        try:
            weights = np.asarray(spec["weights"], dtype=np.float64)
            bias = np.asarray(spec["bias"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as error:
            raise ClassifierError(f"classifier: bad {what}: {error!r}") from None
        if weights.shape != (labels, width) or bias.shape != (labels,):
            raise ClassifierError(
                f"classifier: the {what} weights must be labels × (the embedding's plus the n-grams' "
                f"dimension), {labels} × {width}, and its bias one per label"
            )
        return cls(weights, bias)

    def probabilities(self, features: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return softmax(features @ self.weights.T + self.bias)


@dataclass(frozen=True)
class EarlyExit:
    """The head over a split encoder's first graph (``layers`` transformer layers)."""

    layers: int
    head: Head


class DomainClassifier:
    """The domain of a prompt and the head's softmax confidence; below ``threshold`` L2 confirms. With
    ``early``, a prompt the early head is that sure of is decided on the encoder's first layers alone."""

    def __init__(
        self,
        encoder: Encoder,
        labels: tuple[str, ...],
        head: Head,
        threshold: float,
        ngrams: CharNgrams | None = None,
        early: EarlyExit | None = None,
    ) -> None:
        if head.weights.shape != (len(labels), head.weights.shape[1]) or head.bias.shape != (len(labels),):
            raise ClassifierError("classifier: weights must be labels × dimension and bias one per label")
        if (early is not None) != encoder.split:
            raise ClassifierError("classifier: an early exit needs a split encoder, and a split encoder one")
        self.encoder = encoder
        self.labels = labels
        self.head = head
        self.threshold = threshold
        self.ngrams = ngrams
        self.early = early

    @classmethod
    def from_spec(cls, spec: dict[str, Any], base: Path) -> DomainClassifier:
        """``spec`` is a rules bundle's ``classifier`` section; file names are relative to ``base``."""
        if not isinstance(spec, dict):
            raise ClassifierError("classifier: the section must be a JSON object")
        try:
            labels = tuple(str(label) for label in spec["labels"])
            threshold = float(spec["threshold"])
            max_length = int(spec["max_length"])
            encoder_name, encoder_sha = spec["encoder"], spec["encoder_sha256"]
            tokenizer_name, tokenizer_sha = spec["tokenizer"], spec["tokenizer_sha256"]
            early_spec = spec.get("early_exit")
            layers = None if early_spec is None else int(early_spec["layers"])
        except (KeyError, TypeError, ValueError) as error:
            raise ClassifierError(f"classifier: bad section: {error!r}") from None
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise ClassifierError("classifier: at least two distinct labels are needed")
        if not 0.0 < threshold <= 1.0:
            raise ClassifierError("classifier: threshold must be in (0, 1]")
        ngrams = CharNgrams.from_spec(spec["char_ngrams"]) if "char_ngrams" in spec else None
        width = EMBEDDING_DIM + (ngrams.buckets if ngrams else 0)
        head = Head.from_spec(spec, len(labels), width, "head")
        onnx_path = _pinned(base, encoder_name, encoder_sha, "encoder")
        early = None
        rest_path = None
        if layers is not None:
            early = EarlyExit(layers, Head.from_spec(early_spec, len(labels), width, "early exit head"))
            rest_path = _pinned(
                base, spec.get("encoder_rest"), spec.get("encoder_rest_sha256"), "encoder rest"
            )
        tokenizer_path = _pinned(base, tokenizer_name, tokenizer_sha, "tokenizer")
        encoder = Encoder(onnx_path, tokenizer_path, max_length, rest_path)
        return cls(encoder, labels, head, threshold, ngrams, early)

    def classify(self, text: str) -> Classification:
        grams = None if self.ngrams is None else self.ngrams.features(text)

        def features(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
            """What a head reads: an embedding, then the n-grams when the bundle has them."""
            wide = vector.astype(np.float64)
            return wide if grams is None else np.concatenate([wide, grams])

        tokens = self.encoder.tokens(text)
        vector = self.encoder.first(tokens)
        if self.early is not None:
            probs = self.early.head.probabilities(features(vector))
            best = int(np.argmax(probs))
            if probs[best] >= self.threshold:
                return Classification(domain=self.labels[best], confidence=float(probs[best]), early=True)
            vector = self.encoder.rest(tokens)
        probs = self.head.probabilities(features(vector))
        best = int(np.argmax(probs))
        return Classification(domain=self.labels[best], confidence=float(probs[best]))
