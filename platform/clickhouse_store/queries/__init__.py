"""The SQL each domain sends to ClickHouse, one module per domain: the only place outside `query`
where SQL text is written. Functions take plain values (datetimes, codes, parsed expressions) and
return rows or small typed results; the domain packages (billing, sla, usage, finance, ledger) map
them to their own objects and never write SQL or import `query` themselves."""
