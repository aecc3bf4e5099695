package catalog_test

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/benthos-zerobus/benthos-zerobus/internal/catalog"
	"github.com/benthos-zerobus/benthos-zerobus/internal/typemap"
)

// The output builds the desired table from the incoming Arrow schema plus the
// reserved columns, and the catalog plans against the live table.
func ExamplePlan() {
	reserved := typemap.Column{Name: "_zb_emit_ts", Type: typemap.Primitive(typemap.Timestamp),
		Comment: "Time the zerobus output stamped this row at write"}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	desired, err := catalog.DesiredFromArrow("main.raw.users", schema, reserved)
	if err != nil {
		panic(err)
	}
	desired.Comments = map[string]string{"email": "Contact address"}

	live := &catalog.TableState{FullName: "main.raw.users", TableType: "MANAGED", Properties: map[string]string{},
		Columns: []typemap.Column{
			{Name: "id", Type: typemap.Primitive(typemap.Int), Nullable: true},
			{Name: "_zb_emit_ts", Type: typemap.Primitive(typemap.Timestamp), Comment: reserved.Comment},
		}}
	plan := catalog.Plan(live, desired)
	fmt.Println(plan)

	desired.AllowWidening = true
	plan = catalog.Plan(live, desired)
	stmts, _ := plan.SQL()
	for _, s := range stmts {
		fmt.Println(s)
	}
	// Output:
	// table main.raw.users: 3 step(s)
	//   1. REFUSE column "id": widening int to bigint is lossless but not opted in (enable widening)
	//   2. add column "email" string comment "Contact address"
	//   3. set properties {zerobus.comment_hashes="{\"_zb_emit_ts\":\"473d788c3361\",\"email\":\"2b750e0afe0a\"}", zerobus.managed="true"}
	// ALTER TABLE `main`.`raw`.`users` SET TBLPROPERTIES ('delta.enableTypeWidening'='true')
	// ALTER TABLE `main`.`raw`.`users` ALTER COLUMN `id` TYPE bigint
	// ALTER TABLE `main`.`raw`.`users` ADD COLUMNS (`email` string COMMENT 'Contact address')
	// ALTER TABLE `main`.`raw`.`users` SET TBLPROPERTIES ('zerobus.comment_hashes'='{"_zb_emit_ts":"473d788c3361","email":"2b750e0afe0a"}', 'zerobus.managed'='true')
}
