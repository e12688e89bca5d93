from replywire.commands import consumer

raise SystemExit(consumer())
