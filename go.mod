module github.com/idemkit/idem

go 1.26.0

require (
	github.com/dave/jennifer v1.7.1
	github.com/jackc/pgx/v5 v5.12.0
	golang.org/x/tools v0.52.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
