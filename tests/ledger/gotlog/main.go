// An independent check of Treemeter's log with the Go project's own transparency-log code
// (golang.org/x/mod/sumdb/note and tlog, as Debian's golang-golang-x-mod-dev ships them): it reads one
// JSON object on stdin, opens both signed checkpoints with the pinned verifier key, then checks the
// inclusion proof of a leaf and the consistency proof between the checkpoints. It prints one line and
// exits 0 when everything verifies, 1 with the reason otherwise. Built by tests/ledger/test_go_tlog.py.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	VerifierKey   string   `json:"vkey"`
	Checkpoint    string   `json:"checkpoint"`
	OldCheckpoint string   `json:"old_checkpoint"`
	LeafIndex     int64    `json:"leaf_index"`
	LeafHash      string   `json:"leaf_hash"`
	Inclusion     []string `json:"inclusion"`
	Consistency   []string `json:"consistency"`
}

type head struct {
	size int64
	root tlog.Hash
}

func open(text string, verifier note.Verifier) (head, error) {
	signed, err := note.Open([]byte(text), note.VerifierList(verifier))
	if err != nil {
		return head{}, fmt.Errorf("note: %w", err)
	}
	lines := strings.Split(signed.Text, "\n")
	if len(lines) < 4 || lines[0] != verifier.Name() {
		return head{}, fmt.Errorf("checkpoint: not a checkpoint of %s", verifier.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return head{}, fmt.Errorf("checkpoint: bad tree size %q", lines[1])
	}
	root, err := hash(lines[2])
	if err != nil {
		return head{}, fmt.Errorf("checkpoint: %w", err)
	}
	return head{size, root}, nil
}

func hash(text string) (tlog.Hash, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(text)
	if err != nil || len(raw) != tlog.HashSize {
		return tlog.Hash{}, fmt.Errorf("bad hash %q", text)
	}
	var h tlog.Hash
	copy(h[:], raw)
	return h, nil
}

func hashes(texts []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(texts))
	for i, text := range texts {
		h, err := hash(text)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

func run() error {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("input: %w", err)
	}
	verifier, err := note.NewVerifier(in.VerifierKey)
	if err != nil {
		return fmt.Errorf("verifier key: %w", err)
	}
	latest, err := open(in.Checkpoint, verifier)
	if err != nil {
		return err
	}
	older, err := open(in.OldCheckpoint, verifier)
	if err != nil {
		return err
	}
	leaf, err := hash(in.LeafHash)
	if err != nil {
		return err
	}
	inclusion, err := hashes(in.Inclusion)
	if err != nil {
		return err
	}
	if err := tlog.CheckRecord(inclusion, latest.size, latest.root, in.LeafIndex, leaf); err != nil {
		return fmt.Errorf("inclusion: %w", err)
	}
	consistency, err := hashes(in.Consistency)
	if err != nil {
		return err
	}
	if err := tlog.CheckTree(consistency, latest.size, latest.root, older.size, older.root); err != nil {
		return fmt.Errorf("consistency: %w", err)
	}
	fmt.Printf("verified: leaf %d in checkpoint %d, consistent with checkpoint %d\n", in.LeafIndex, latest.size, older.size)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
