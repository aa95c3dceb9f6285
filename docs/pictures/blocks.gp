# Picture 1: A(tau) = exp(tau X) of each canonical block (blocks_*.dat).
load "common.gp"
set terminal pngcairo size 800,640 font "DejaVu Sans,9" noenhanced
set output outdir . "/blocks.png"
set multiplot layout 2,2 title "A(tau) = exp(tau X) of peal's canonical blocks"
set title "RealBlock{lambda}: e^(lambda tau)"
set xlabel "tau"
set key top left
plot dat("blocks_real.dat") u 1:2 w l lw 2 t "lambda = -0.5 (decay)", \
     "" u 1:3 w l lw 2 t "lambda = +0.3 (growth)"
set title "RotationBlock{omega=1, a}: A(tau) (1, 0)"
set size ratio -1
set xlabel "x"; set ylabel "y"
set key bottom right font ",8"
plot dat("blocks_rotation.dat") u 2:3 w l lw 2 t "a = 0: circle (RoPE)", \
     "" u 4:5 w l lw 2 t "a = -0.15: spiral (xPos, RetNet)"
set size noratio
set title "JordanBlock<M>{0}: entries of A(tau)"
set xlabel "tau"; unset ylabel
set key top left font ",8"
plot dat("blocks_jordan.dat") u 1:3 w l lw 2 t "M=2, (0,1): tau (puck at constant velocity)", \
     "" u 1:2 w l lw 2 dt 2 t "M=2, (0,0) = (1,1) = 1", \
     "" u 1:6 w l lw 2 t "M=3, (0,2): tau^2/2 (constant acceleration)"
set title "RotationJordanBlock<2>{omega=1, a=-0.2}: A(tau) e3"
set size ratio -1
set xlabel "x"; set ylabel "y"
set key bottom right font ",8"
plot dat("blocks_rotation_jordan.dat") u 4:5 w l lw 2 t "diagonal pair: e^(a tau) R(-tau) e1", \
     "" u 2:3 w l lw 2 t "coupled pair: tau e^(a tau) R(-tau) e1"
unset multiplot
