from spectune._launch import main

main()
