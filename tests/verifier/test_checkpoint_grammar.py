"""Both checkpoint parsers, the platform's (ledger.notes) and the verifier's own (treemeter_verify.note),
accept exactly the C2SP tlog-checkpoint grammar: a tree size of ASCII digits without leading zeroes below
2^64, and a root hash in canonical standard base64, so one checkpoint has one text. Every refusal is the
parser's NoteError, never another exception. Each case is a note signed by the log's key, so the
signature is never what refuses it."""

from __future__ import annotations

import base64

import pytest

from ledger import notes as platform_notes
from treemeter_records import private_key_from_seed, public_key_bytes
from treemeter_verify import note as verifier_notes

ORIGIN = "treemeter.test/ledger"
KEY = private_key_from_seed(bytes(range(32)))
ROOT = bytes(range(32))
ROOT_TEXT = base64.b64encode(ROOT).decode()  # "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def _signed(body: str) -> str:
    """``body`` as a signed note of the log's key, whatever it says."""
    blob = platform_notes.key_hash(ORIGIN, public_key_bytes(KEY)) + KEY.sign(body.encode())
    return f"{body}\n{platform_notes.DASH} {ORIGIN} {base64.b64encode(blob).decode()}\n"


def _platform(body: str) -> tuple[str, int, bytes]:
    opened = platform_notes.open_checkpoint(_signed(body), ORIGIN, public_key_bytes(KEY))
    return opened.origin, opened.size, opened.root_hash


def _verifier(body: str) -> tuple[str, int, bytes]:
    pinned = verifier_notes.parse_verifier_key(platform_notes.verifier_key(ORIGIN, public_key_bytes(KEY)))
    opened = verifier_notes.open_checkpoint(_signed(body), pinned)
    return opened.origin, opened.size, opened.root_hash


PARSERS = {
    "platform": (_platform, platform_notes.NoteError),
    "verifier": (_verifier, verifier_notes.NoteError),
}


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(
    ("size", "value"), [("0", 0), ("7", 7), ("20852163", 20852163), ("18446744073709551615", 2**64 - 1)]
)
def test_a_size_in_the_grammar_is_read(parser: str, size: str, value: int) -> None:
    read, _ = PARSERS[parser]
    assert read(f"{ORIGIN}\n{size}\n{ROOT_TEXT}\n") == (ORIGIN, value, ROOT)


def test_extension_lines_after_the_root_are_allowed() -> None:
    for read, _ in PARSERS.values():
        assert read(f"{ORIGIN}\n5\n{ROOT_TEXT}\nextension line\n") == (ORIGIN, 5, ROOT)


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(
    "size",
    [
        "\u0663",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes
        "\u00b2",  # SUPERSCRIPT TWO: isdigit() says yes and int() raises a plain ValueError
        "\uff17",  # FULLWIDTH DIGIT SEVEN: int() reads it as 7
        "01",
        "00",
        "+1",
        "-1",
        " 1",
        "1 ",
        "1_000",
        "1e3",
        "18446744073709551616",  # 2^64
        "1" * 5000,  # past Python's int-from-text limit, which raises a plain ValueError
    ],
)
def test_a_size_outside_the_grammar_is_refused_with_the_note_error(parser: str, size: str) -> None:
    read, error = PARSERS[parser]
    with pytest.raises(error, match="tree size"):
        read(f"{ORIGIN}\n{size}\n{ROOT_TEXT}\n")


SLASHED = base64.b64encode(bytes(range(200, 232))).decode()  # "yMnKy8zNzs/Q0dLT1NXW19jZ2tvc3d7f4OHi4+Tl5uc="


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize(
    ("root", "why"),
    [
        # the same 32 bytes with the last character's two padding bits set: ...Hh8= read as ...Hh9=
        (ROOT_TEXT[:-2] + "9=", "canonical"),
        (ROOT_TEXT[:-1], "base64"),  # padding left out
        (SLASHED.replace("/", "_").replace("+", "-"), "base64"),  # the URL-safe alphabet
        (ROOT_TEXT[:-2] + "\u0661=", "base64"),  # a non-ASCII character
        (" " + ROOT_TEXT, "base64"),
        (base64.b64encode(ROOT[:31]).decode(), "32"),
    ],
)
def test_a_root_hash_outside_the_grammar_is_refused(parser: str, root: str, why: str) -> None:
    read, error = PARSERS[parser]
    with pytest.raises(error, match=why):
        read(f"{ORIGIN}\n3\n{root}\n")


def test_a_root_hash_with_both_alphabet_extras_is_read() -> None:
    for read, _ in PARSERS.values():
        assert read(f"{ORIGIN}\n3\n{SLASHED}\n") == (ORIGIN, 3, bytes(range(200, 232)))


def test_the_padding_bits_case_decodes_to_the_same_bytes() -> None:
    """What made it a case: a lenient decoder reads both texts as one root."""
    loose = ROOT_TEXT[:-2] + "9="
    assert ROOT_TEXT.endswith("8=") and base64.b64decode(loose) == ROOT
