from replywire.commands import replywire

raise SystemExit(replywire())
