/* The record page's Verify button: the browser checks the record's inclusion in the signed log itself.
 *
 * 1. GET the inclusion proof (/v1/ledger/records/<id>/inclusion): leaf index, leaf hash, audit path,
 *    tree size and the signed checkpoint (a C2SP signed note).
 * 2. Hash up the path with SHA-256 (RFC 9162: node = SHA-256(0x01 ‖ left ‖ right)) to a root.
 * 3. The checkpoint's body names the same tree size and root.
 * 4. Its Ed25519 signature verifies under the platform's key (key hash = SHA-256(name ‖ 0x0A ‖ 0x01 ‖
 *    key)[:4]).
 * Each step is shown as it passes or fails. Also loaded by node for tests (module.exports). */
(function (root) {
  "use strict";
  var subtle = root.crypto.subtle;
  var encoder = new TextEncoder();

  function fromBase64(text) {
    var raw = atob(text), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }
  function fromHex(text) {
    var out = new Uint8Array(text.length / 2);
    for (var i = 0; i < out.length; i++) out[i] = parseInt(text.substr(2 * i, 2), 16);
    return out;
  }
  function toBase64(bytes) { return btoa(String.fromCharCode.apply(null, Array.from(bytes))); }
  function concat() {
    var parts = Array.from(arguments), size = parts.reduce(function (n, p) { return n + p.length; }, 0);
    var out = new Uint8Array(size), at = 0;
    parts.forEach(function (p) { out.set(p, at); at += p.length; });
    return out;
  }
  function same(a, b) { return a.length === b.length && a.every(function (x, i) { return x === b[i]; }); }
  async function sha256(bytes) { return new Uint8Array(await subtle.digest("SHA-256", bytes)); }
  function nodeHash(left, right) { return sha256(concat(new Uint8Array([1]), left, right)); }

  /* The root an audit path leads to from leaf `index` of a tree of `size` leaves (RFC 9162 2.1.3.2). */
  async function rootFromInclusion(index, size, leaf, path) {
    if (!(index >= 0 && index < size)) throw new Error("the leaf is not in the tree");
    var fn = index, sn = size - 1, r = leaf;
    for (var k = 0; k < path.length; k++) {
      if (sn === 0) throw new Error("the proof is too long");
      if ((fn & 1) || fn === sn) {
        r = await nodeHash(path[k], r);
        while (!(fn & 1) && fn !== 0) { fn >>= 1; sn >>= 1; }
      } else {
        r = await nodeHash(r, path[k]);
      }
      fn >>= 1; sn >>= 1;
    }
    if (sn !== 0) throw new Error("the proof is too short");
    return r;
  }

  /* A C2SP signed note: body lines, an empty line, then "— <name> <base64(key hash ‖ signature)>". */
  function parseNote(note) {
    var cut = note.indexOf("\n\n");
    if (cut < 0) throw new Error("the checkpoint is not a signed note");
    var text = note.slice(0, cut + 1), lines = text.split("\n");
    var signatures = note.slice(cut + 2).split("\n").filter(Boolean).map(function (line) {
      var parts = line.split(" ");
      return { name: parts[1], blob: fromBase64(parts[2]) };
    });
    return { text: text, origin: lines[0], size: Number(lines[1]), root: fromBase64(lines[2]), signatures: signatures };
  }

  async function keyHash(name, publicKey) {
    return (await sha256(concat(encoder.encode(name + "\n"), new Uint8Array([1]), publicKey))).slice(0, 4);
  }

  /* Every step of the check, in order: [{name, ok, detail}]. Stops at the first failure. */
  async function verifyInclusion(proof, origin, publicKeyHex) {
    var steps = [];
    function step(name, ok, detail) { steps.push({ name: name, ok: ok, detail: detail }); return ok; }
    try {
      var leaf = fromBase64(proof.leaf_hash);
      var computed = await rootFromInclusion(proof.leaf_index, proof.tree_size, leaf, proof.proof.map(fromBase64));
      step("path", true, proof.proof.length + " × SHA-256 from leaf " + proof.leaf_index + " of " + proof.tree_size + " → " + toBase64(computed));
      var note = parseNote(proof.checkpoint);
      if (!step("checkpoint", note.origin === origin && note.size === proof.tree_size && same(note.root, computed),
                note.origin + " · size " + note.size + " · root " + toBase64(note.root))) return steps;
      var publicKey = fromHex(publicKeyHex), wanted = await keyHash(origin, publicKey);
      var signature = note.signatures.find(function (s) { return s.name === origin && same(s.blob.slice(0, 4), wanted); });
      if (!step("key", Boolean(signature), origin + " key " + Array.from(wanted, function (b) { return b.toString(16).padStart(2, "0"); }).join(""))) return steps;
      var key = await subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
      var valid = await subtle.verify({ name: "Ed25519" }, key, signature.blob.slice(4), encoder.encode(note.text));
      step("signature", valid, "Ed25519");
    } catch (error) {
      step("error", false, String(error && error.message || error));
    }
    return steps;
  }

  var api = { verifyInclusion: verifyInclusion, rootFromInclusion: rootFromInclusion, parseNote: parseNote };
  if (typeof module !== "undefined" && module.exports) { module.exports = api; return; }

  var button = document.getElementById("verify-record");
  if (!button) return;
  var config = JSON.parse(document.getElementById("verify-config").textContent);
  var text = JSON.parse(document.getElementById("verify-text").textContent);
  var list = document.getElementById("verify-steps");
  button.addEventListener("click", function () {
    list.textContent = "";
    list.dataset.state = "running";
    fetch(config.inclusion_url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json().then(function (body) { if (!r.ok) throw new Error(body.message || r.status); return body; }); })
      .then(function (proof) { return verifyInclusion(proof, config.origin, config.public_key); })
      .catch(function (error) { return [{ name: "error", ok: false, detail: String(error.message || error) }]; })
      .then(function (steps) {
        steps.forEach(function (s) {
          var item = document.createElement("li");
          item.className = s.ok ? "ok" : "failed";
          item.dataset.step = s.name;
          item.textContent = (s.ok ? "✓ " : "✗ ") + (text[s.name] || s.name) + ": " + s.detail;
          list.appendChild(item);
        });
        var verified = steps.length === 4 && steps.every(function (s) { return s.ok; });
        list.dataset.state = verified ? "verified" : "failed";
        var last = document.createElement("li");
        last.className = verified ? "ok summary" : "failed summary";
        last.dataset.testid = "verify-result";
        last.textContent = verified ? text.verified : text.failed;
        list.appendChild(last);
      });
  });
})(typeof window !== "undefined" ? window : globalThis);
