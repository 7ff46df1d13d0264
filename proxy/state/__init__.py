"""State that outlives one call, behind small interfaces with in-memory defaults.

Each kind of state is one Protocol and one memory implementation (the embedded default), so a
shared store can back several `--stateless` replicas later without touching its users.

    spill         the full payloads of shaped results, per operator (SpillStore, MemorySpillStore)
    cooldowns     which providers are fenced off after a rate limit (CooldownBook, MemoryCooldowns)
    spend         each provider's spend this UTC day, for the daily caps (SpendBook, MemorySpend)
    usage         each provider's free-quota units used this UTC month (UsageCounter, MemoryUsage)
    latency       each provider's recent latencies, for the fast strategy (LatencyBook, MemoryLatency)
    seeding       reservations wait while serve rebuilds spend and usage from the ledger (Seeding)
    call_windows  when each call fingerprint was seen lately, for the loop guard (CallWindows,
                  MemoryCallWindows)
    result_cache  the routed tools' recent answers (ResultCache, MemoryResultCache)
"""
