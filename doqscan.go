// Package doqscan holds what belongs to the project as a whole: the database schema
// (schema.sql, embedded so every tool applies the same one) and the version.
package doqscan

import _ "embed"

// SchemaSQL is schema.sql, the baseline schema (version 1). Later changes are migrations
// in internal/store/migrations.
//
//go:embed schema.sql
var SchemaSQL string

// Version is the doqscan release; tools print it with --version and store it in run
// configs.
const Version = "0.1.0-dev"
