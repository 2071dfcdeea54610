CREATE TABLE orders (
    id           text        PRIMARY KEY,
    customer_id  text        NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents > 0),
    currency     text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid')),
    charge_id    text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
