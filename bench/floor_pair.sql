SELECT bench.floor_propose(n::text, 'pair-key-' || n, 'pair-' || n) AS proposal FROM (SELECT nextval('bench.orders1') AS n) s \gset
SELECT bench.floor_apply(:proposal::uuid);
