SELECT toolgate.confirm(:token1, c.token) FROM bench.confirmations c WHERE c.n = (SELECT nextval('bench.confirmations_used'));
