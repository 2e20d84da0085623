-- No wait for the WAL flush (about 4 ms here): what is measured is the token, not the disk.
SET synchronous_commit = off;
SELECT toolgate.read_order(t.token, '1')
  FROM bench.identity_tokens t
 WHERE t.alg = :alg AND t.n = (SELECT nextval(('bench.identity_used_' || :alg)::regclass));
