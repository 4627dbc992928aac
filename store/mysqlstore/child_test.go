package mysqlstore_test

const childEnv = "MYSQLSTORE_TEST_CHILD"
