"""L1's semantic classifier: a pretrained sentence encoder (ONNX) and a softmax head trained here.

Deciding needs onnxruntime, ``tokenizers`` and numpy only (``model.py``); training (``train.py``) also
uses torch to export the encoder once. See docs/classifier.md.
"""

from compute_agents.classifier.model import (
    DEFAULT_THRESHOLD,
    Classification,
    ClassifierError,
    DomainClassifier,
    Encoder,
)

__all__ = ["DEFAULT_THRESHOLD", "Classification", "ClassifierError", "DomainClassifier", "Encoder"]
