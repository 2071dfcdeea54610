DROP TABLE orders;
