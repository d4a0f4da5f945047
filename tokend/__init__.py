"""gslice token daemon (tokend): one per GPU; hands out time-slice tokens and keeps the memory ledger."""
