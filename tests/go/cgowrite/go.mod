module stagehand.test/cgowrite

go 1.19
