SELECT bench.floor_close(n::text, 'close-key-' || n, 'c-' || :client_id) FROM (SELECT nextval('bench.orders') AS n) s;
