// Package mysqlstore is a [store.Store] in a MySQL or MariaDB (InnoDB)
// table, on database/sql with github.com/go-sql-driver/mysql, whose
// records can be completed inside the handler's own transaction.
package mysqlstore
