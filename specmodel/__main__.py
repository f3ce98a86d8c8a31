from specmodel._entry import run

run()
