from ascend_images.cli.program import main

main()
