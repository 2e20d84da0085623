SELECT bench.floor_bound_propose(n::text, 'bound-pair-key-' || n, 'bound-pair-' || n) AS proposal FROM (SELECT nextval('bench.orders1') AS n) s \gset
SELECT bench.floor_bound_apply(:proposal::uuid);
