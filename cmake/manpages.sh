#!/bin/sh
# Writes ferry.1.gz and ferry-COMMAND.1.gz for each command that `ferry --help` lists, made from
# the commands' own --help, so the pages say what the binary does.
# usage: manpages.sh PATH_TO_FERRY OUTDIR VERSION
# The --help format: "usage: ..." first (continued by indented lines), paragraphs, and sections
# opened by a line "word:" whose items are "  --option ARG   text" with indented continuations.
set -eu
FERRY=$1
OUT=$2
VERSION=$3
mkdir -p "$OUT"
rm -f "$OUT"/*.1.gz "$OUT/stamp"

# page NAME SUMMARY: roff for one page from --help on stdin.
page() {
    awk -v name="$1" -v summary="$2" -v version="$VERSION" '
    function esc(s) {
        gsub(/\\/, "\\e", s)
        gsub(/-/, "\\-", s)
        if (s ~ /^[.\047]/) s = "\\&" s
        return s
    }
    function endpre() { if (inpre) { print ".fi"; inpre = 0 } }
    # Text opens the DESCRIPTION section, the first time there is any.
    function describe() { if (!described) { print ".SH DESCRIPTION"; described = 1 } }
    BEGIN {
        print ".TH " toupper(name) " 1 \"\" \"ferry " version "\" \"User Commands\""
        print ".SH NAME"
        print esc(name) " \\- " esc(summary)
        state = "usage"
    }
    state == "usage" && /^usage: / {
        print ".SH SYNOPSIS"
        print ".nf"
        sub(/^usage: +/, "")
        print esc($0)
        next
    }
    # Continuations are aligned under the text of the first line, after "usage: ".
    state == "usage" && /^ +[^ ]/ { sub(/^       /, ""); print esc($0); next }
    state == "usage" { print ".fi"; state = "text" }
    /^[a-z][a-z ]*:$/ {
        endpre()
        sub(/:$/, "")
        print ".SH " toupper($0)
        state = "list"
        inlist = 0
        next
    }
    /^$/ { endpre(); if (state == "text" && described) print ".PP"; inlist = 0; next }
    # An item: two spaces, the term, two or more spaces, its text (or the term alone). Outside
    # a section only options ("  --x") are items.
    /^  [^ ]/ && (state == "list" || /^  -/) {
        endpre()
        if (state == "text") describe()
        line = substr($0, 3)
        term = line
        text = ""
        if (match(line, /[^ ]  +[^ ]/)) {
            term = substr(line, 1, RSTART)
            text = substr(line, RSTART + 1)
            sub(/^ +/, "", text)
        }
        print ".TP"
        print ".B " esc(term)
        if (text != "") print esc(text)
        inlist = 1
        next
    }
    inlist && /^    / { sub(/^ +/, ""); print esc($0); next }
    # Other indented lines (an example of the output) are kept as they are.
    /^ +[^ ]/ {
        describe()
        if (!inpre) { print ".nf"; inpre = 1 }
        print esc($0)
        next
    }
    {
        endpre()
        if (inlist) print ".PP"
        inlist = 0
        if (state == "list") state = "text"
        describe()
        print esc($0)
    }
    END {
        endpre()
        if (name == "ferry") {
            print ".SH SEE ALSO"
            print "\\fBferry\\-COMMAND\\fR(1) for each command above; README.md and docs/cli.md in"
            print "/usr/share/doc/ferry (or the prefix installed to)."
        } else {
            print ".SH SEE ALSO"
            print "\\fBferry\\fR(1)"
        }
    }'
}

"$FERRY" --help | page ferry "move large sensor frames between processes through shared memory" |
    gzip -9 -n >"$OUT/ferry.1.gz"
# The commands: the indented lines of the "commands:" section, "  NAME   SUMMARY".
"$FERRY" --help | awk '/^commands:$/ { on = 1; next } on && /^  [a-z]/ { print; next } on { exit }' |
    while read -r cmd summary; do
        # A command that was not built (the bridge without Cyclone DDS) has no page.
        help=$("$FERRY" "$cmd" --help 2>/dev/null) || continue
        printf '%s\n' "$help" | page "ferry-$cmd" "$summary" | gzip -9 -n >"$OUT/ferry-$cmd.1.gz"
    done
touch "$OUT/stamp"
