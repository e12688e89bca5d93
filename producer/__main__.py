from replywire.commands import producer

raise SystemExit(producer())
