SELECT bench.floor_propose(n::text, 'pair-key-' || n, 'c-' || :client_id) AS proposal FROM (SELECT nextval('bench.orders1') AS n) s \gset
SELECT bench.floor_apply(:proposal::uuid);
